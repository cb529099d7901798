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
"""

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
