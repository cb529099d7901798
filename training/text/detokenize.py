"""Undoes word-piece spacing so that BLEU sees text as a person writes it.

`WordPieceTokenizer.detokenize` splits on whitespace and on every punctuation
character, then joins the words with single spaces: 'A man's "t-shirt" (3.5).'
comes back as 'a man ' s " t - shirt " ( 3 . 5 ) .'. `detokenize_punctuation`
decides, for each punctuation token, whether it clings to the word before it,
the word after it, both or neither, and removes those spaces.

The rules follow how each mark is spaced in the Multi30k references (train,
val and test_2016_flickr, about 31,000 lines per language):

* hyphen and slash between words: attached to both ("t-shirt", "and/or"):
  a-a 1,441 (en), 2,610 (de), 3,522 (fr). A dash spaced between words is 6
  lines per language (4 in cs), and word pieces cannot tell it from a hyphen,
  so it is joined too. German coordination keeps its space: "Obst- und",
  "und -tassen" (51 lines, against 1 "Putz-und").
* apostrophe: English clitics attach to both ("man's", "don't", "80's");
  after a word of two or more letters ending in "s" it is a plural possessive
  and attaches left only ("dogs' toys"; "word' " is 15 lines in en; no French or German
  word ends in "s" before an elided apostrophe); after a number it is feet
  ("4' tall"); else between letters it attaches to both (French "l'homme",
  15,887 lines; "o'clock", "rock'n'roll"); before punctuation or at the end it
  closes ("cafe'."). Single quotes used as quotation marks are rare (13 lines
  in en) and not paired.
* ".", ",", ":" between digits: attached to both ("3.5", "1,000", "10:30";
  never spaced in the references).
* straight double quotes: paired in order, the first of a pair attaches to
  the next word, the second to the previous one (a lone quote with no word
  after it closes); German „ opens and “ closes (a“ 169 against “a 3).
* other marks: `.,!?;:%)]}“”»` attach left, `([{$„«` attach right, "#"
  attaches to a number ("#8", 10 of 11 in en), "&" joins single letters
  ("A&M", "Q&A"; "Lounge & Grill" stays spaced).

The en dash "–" (German: 69 spaced of 70) is left alone. Normally spaced
text comes back unchanged except for spaces before ",.;:!?" (French
typography; sacreBLEU's 13a tokens are the same either way) and a spaced
" - ", which is joined: on the Multi30k train references, cased BLEU of
`detokenize_punctuation(reference)` against the reference is 99.99 in each
of en, de, fr and cs. Re-spacing the test_2016_flickr references with a
`WordPieceTokenizer` and undoing it gives 100.00 (en, de, fr) and 99.95 (cs)
cased BLEU, against 98.41, 97.17, 79.94 and 99.90 for the earlier rules
(clitics and spaces before and after brackets and punctuation only).

`detokenize_punctuation_graph` applies the same rules to a string tensor
with TensorFlow core ops, so that a served SavedModel answers "a man's
t-shirt." rather than "a man ' s t - shirt ." and the package's own
predictions match it.
"""

import functools
import sys

import tensorflow as tf

_ATTACH_LEFT = frozenset(".,!?;:%)]}“”»…")
_ATTACH_RIGHT = frozenset("([{$„«")
_CLOSING = frozenset(")]}“”»")
_JOINERS = frozenset("-/")
_APOSTROPHES = frozenset("'’‘")
_NUMBER_SEPARATORS = frozenset(".,:")
# English clitics after an apostrophe (and German "geht's").
_CLITICS = frozenset({"s", "t", "re", "ve", "ll", "d", "m"})
# German words that follow "Obst-" / precede "-tassen" in coordination.
_COORDINATORS = frozenset({"und", "oder", "bzw", "sowie"})


def detokenize_punctuation(text):
    """Removes the spaces word-piece joining put around punctuation.

    Args:
        text: One sentence, words separated by whitespace, e.g. the output of
            `WordPieceTokenizer.detokenize`.

    Returns:
        The sentence with single spaces between words and punctuation
        attached as the module docstring describes, e.g.
        'a man ' s " t - shirt " ( 3 . 5 ) .' -> 'a man's "t-shirt" (3.5).'.
    """
    tokens = text.split()
    if not tokens:
        return ""
    quotes = _quote_roles(tokens)
    sides = [_attachment(tokens, i, quotes) for i in range(len(tokens))]
    pieces = [tokens[0]]
    for i in range(1, len(tokens)):
        if not (sides[i - 1][1] or sides[i][0]):
            pieces.append(" ")
        pieces.append(tokens[i])
    return "".join(pieces)


def _quote_roles(tokens):
    """{index: True if opening} for each standalone straight double quote."""
    roles = {}
    opening = True
    for i, token in enumerate(tokens):
        if token != '"':
            continue
        # A quote with no word after it can only close ('he said " hi " .').
        if opening and not any(_starts_word(t) for t in tokens[i + 1 :]):
            opening = False
        roles[i] = opening
        opening = not opening
    return roles


def _starts_word(token):
    return token[0].isalnum()


def _ends_word(token, quote_closes=False):
    return token[-1].isalnum() or token in _CLOSING or quote_closes


def _attachment(tokens, i, quotes):
    """(attaches to the previous token, attaches to the next token)."""
    token = tokens[i]
    before = tokens[i - 1] if i > 0 else None
    after = tokens[i + 1] if i + 1 < len(tokens) else None
    if i in quotes:
        return (not quotes[i], quotes[i])
    if len(token) > 1 and token != "...":
        return (False, False)  # A word.
    word_before = before is not None and _ends_word(before, quotes.get(i - 1) is False)
    word_after = after is not None and _starts_word(after)
    if token in _APOSTROPHES:
        return _apostrophe(before, after, word_before, word_after)
    if token in _JOINERS:
        if token == "-" and word_before and word_after:
            if after.lower() in _COORDINATORS:
                return (True, False)  # "Obst- und Gemüse".
            if before.lower() in _COORDINATORS:
                return (False, True)  # "Teller und -tassen".
        if token == "-" and word_before and after is None:
            return (True, False)  # Cut-off German lines end "Fahrrad-".
        return (word_before and word_after,) * 2
    if token in _NUMBER_SEPARATORS and word_before and word_after:
        if before[-1].isdigit() and after[0].isdigit():
            return (True, True)
    if token == "&" and word_before and word_after and len(before) == len(after) == 1:
        return (True, True)  # "A&M", "Q&A"; "Lounge & Grill" stays spaced.
    if token == "#" and word_after and after[0].isdigit():
        return (False, True)
    return (token in _ATTACH_LEFT or token == "...", token in _ATTACH_RIGHT)


def _apostrophe(before, after, word_before, word_after):
    if not word_before:
        return (False, False)  # An opening single quote: leave it spaced.
    if not word_after:
        return (True, False)  # "cafe' ." -> "cafe'."
    if after.lower() in _CLITICS:
        return (True, True)  # "man's", "don't", "80's".
    if before[-1].isdigit():
        return (True, False)  # "4' tall".
    if len(before) > 1 and before[-1] in "sS":
        return (True, False)  # "dogs' toys".
    return (True, True)  # "l'homme", "o'clock".


# ---------------------------------------------------------------------------
# The same rules as graph ops, for serving.
#
# Each token is compared with its neighbours in its row: the ragged tokens'
# flat values are shifted by one, and a neighbour across a row boundary is
# masked out. A straight double quote opens when an even number of quotes
# comes before it in its row and some word follows it; this is what
# `_quote_roles` computes, since a quote forced to close (no word after it)
# has only quotes with no word after them after it, which close too.


def _char_class(predicate):
    """An RE2 character class of the code points where `predicate` holds.

    Built from this Python's own Unicode tables, so `str.isalnum` and
    `str.isdigit` (which `detokenize_punctuation` uses) and the graph agree on
    every character, where RE2's `\\pL` or `\\p{Nd}` follow its own Unicode
    version and `isdigit` also holds superscripts and circled digits.
    """
    ranges, start = [], None
    for code in range(sys.maxunicode + 2):
        inside = (
            code <= sys.maxunicode
            and not 0xD800 <= code < 0xE000
            and predicate(chr(code))
        )
        if inside and start is None:
            start = code
        elif not inside and start is not None:
            ranges.append(
                f"\\x{{{start:x}}}"
                if start == code - 1
                else f"\\x{{{start:x}}}-\\x{{{code - 1:x}}}"
            )
            start = None
    return "[" + "".join(ranges) + "]"


@functools.cache
def _classes():
    return _char_class(str.isalnum), _char_class(str.isdigit)


def _is_in(tokens, members):
    members = tf.constant(sorted(members), tf.string)
    return tf.reduce_any(tf.equal(tokens[:, None], members[None, :]), axis=1)


def detokenize_ids(tokenizer, token_ids):
    """`(B, L)` decoded ids -> `(B,)` `tf.string`, the text a translator serves:
    `tokenizer.detokenize` (which stops at `[END]`), then punctuation attached
    by `detokenize_punctuation_graph`. The SavedModel's signatures and
    `Translation.outputs` both call this, so they answer the same text."""
    text = tokenizer.detokenize(tf.RaggedTensor.from_tensor(token_ids))
    return detokenize_punctuation_graph(text)


def detokenize_punctuation_graph(texts):
    """`detokenize_punctuation` of each string of a tensor, in graph ops.

    Args:
        texts: A `(B,)` `tf.string` tensor (or list of str), each sentence's
            words separated by spaces, e.g. `WordPieceTokenizer.detokenize`.

    Returns:
        A `(B,)` `tf.string` tensor: element i is
        `detokenize_punctuation(texts[i])` (words are split at ASCII
        whitespace, which is all the word-piece detokenizer writes).
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    if texts.shape.rank != 1:
        raise ValueError(
            f"texts must be a 1-D string tensor; received shape {texts.shape}."
        )
    alnum, digit = _classes()
    tokens = tf.strings.split(texts)
    t = tokens.flat_values
    rows = tokens.value_rowids()
    row_start = tf.gather(tokens.row_starts(), rows)
    row_end = tf.gather(tokens.row_limits(), rows) - 1
    index = tf.range(tf.size(t, out_type=tf.int64))
    has_before, has_after = index > row_start, index < row_end

    def before(x, empty):
        shifted = tf.concat([tf.reshape(empty, [1]), x[:-1]], axis=0)
        return tf.where(has_before, shifted, empty)

    def after(x, empty):
        shifted = tf.concat([x[1:], tf.reshape(empty, [1])], axis=0)
        return tf.where(has_after, shifted, empty)

    length = tf.strings.length(t, unit="UTF8_CHAR")
    first = tf.strings.substr(t, 0, 1, unit="UTF8_CHAR")
    last = tf.strings.substr(t, -1, 1, unit="UTF8_CHAR")
    lower = tf.strings.lower(t, encoding="utf-8")
    starts_word = tf.strings.regex_full_match(first, alnum)
    first_digit = tf.strings.regex_full_match(first, digit)
    last_digit = tf.strings.regex_full_match(last, digit)

    # Quote roles (`_quote_roles`).
    is_quote = tf.equal(t, '"')
    quotes = tf.cumsum(tf.cast(is_quote, tf.int64), exclusive=True)
    quotes_before = quotes - tf.gather(quotes, row_start)
    words = tf.cumsum(tf.cast(starts_word, tf.int64))
    word_follows = tf.gather(words, row_end) > words
    opening = is_quote & (quotes_before % 2 == 0) & word_follows
    closing_quote = is_quote & ~opening

    ends_word = (
        tf.strings.regex_full_match(last, alnum) | _is_in(t, _CLOSING) | closing_quote
    )
    word_before = before(ends_word, False)
    word_after = after(starts_word, False)
    both = word_before & word_after
    length_before, length_after = before(length, 0), after(length, 0)
    lower_before, lower_after = before(lower, ""), after(lower, "")
    last_digit_before = before(last_digit, False)
    first_digit_after = after(first_digit, False)
    hyphen = tf.equal(t, "-")
    apostrophe = _is_in(t, _APOSTROPHES)

    # (condition, attaches left, attaches right), from the lowest priority to
    # the highest: each later condition overrides the earlier ones, as the
    # earlier `return`s of `_attachment` and `_apostrophe` do.
    true = tf.ones_like(is_quote)
    false = tf.zeros_like(is_quote)
    cases = [
        (tf.equal(t, "#") & word_after & first_digit_after, false, true),
        (
            tf.equal(t, "&")
            & both
            & tf.equal(length_before, 1)
            & tf.equal(length_after, 1),
            true,
            true,
        ),
        (
            _is_in(t, _NUMBER_SEPARATORS)
            & both
            & last_digit_before
            & first_digit_after,
            true,
            true,
        ),
        (_is_in(t, _JOINERS), both, both),
        (hyphen & word_before & ~has_after, true, false),
        (hyphen & both & _is_in(lower_before, _COORDINATORS), false, true),
        (hyphen & both & _is_in(lower_after, _COORDINATORS), true, false),
        (apostrophe, true, true),
        (
            apostrophe & (length_before > 1) & _is_in(before(last, ""), {"s", "S"}),
            true,
            false,
        ),
        (apostrophe & last_digit_before, true, false),
        (apostrophe & _is_in(lower_after, _CLITICS), true, true),
        (apostrophe & ~word_after, true, false),
        (apostrophe & ~word_before, false, false),
        ((length > 1) & tf.not_equal(t, "..."), false, false),  # A word.
        (is_quote, ~opening, opening),
    ]
    left = _is_in(t, _ATTACH_LEFT | {"..."})
    right = _is_in(t, _ATTACH_RIGHT)
    for condition, attach_left, attach_right in cases:
        left = tf.where(condition, attach_left, left)
        right = tf.where(condition, attach_right, right)

    space = has_before & ~(before(right, False) | left)
    pieces = tf.strings.join([tf.where(space, " ", ""), t])
    return tf.strings.reduce_join(tokens.with_flat_values(pieces), axis=1)
