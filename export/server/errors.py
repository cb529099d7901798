"""What a request gets back when it cannot be answered: a status and one message.

TensorFlow Serving answers every failed REST call with `{"error": "..."}`
and an HTTP status mapped from its error code; this server does the same,
with the codes a client of TensorFlow Serving already handles:

| raised as | HTTP | when |
|---|---|---|
| `bad_request` | 400 | malformed JSON, wrong keys or types, a batch too large |
| `not_found` | 404 | an unknown model, version, signature or path |
| `not_allowed` | 405 | a GET where only POST answers, or the other way round |
| `too_large` | 413 | a body over `--rest_api_max_body_bytes` |
| `unavailable` | 503 | the queue is full, or the server is shutting down |
| `deadline_exceeded` | 504 | a request past `--rest_api_timeout_in_ms` |

The message names what was wrong (the key, the instance, the value's type)
so that the client's author can fix the request from it alone.
"""


class RequestError(Exception):
    """A request that cannot be answered: `status` (HTTP) and `message`.

    Args:
        status: The HTTP status code.
        message: One line naming what was wrong.
    """

    def __init__(self, status, message):
        super().__init__(message)
        self.status = int(status)
        self.message = str(message)

    @property
    def body(self):
        """TensorFlow Serving's error body."""
        return {"error": self.message}


def bad_request(message):
    return RequestError(400, message)


def not_found(message):
    return RequestError(404, message)


def not_allowed(message):
    return RequestError(405, message)


def too_large(message):
    return RequestError(413, message)


def unavailable(message):
    return RequestError(503, message)


def deadline_exceeded(message):
    return RequestError(504, message)


_INVALID_ARGUMENT = 3  # tf.errors.INVALID_ARGUMENT's code


def from_exception(error):
    """`error` as a `RequestError`: TensorFlow's invalid-argument errors (an
    input the signature refuses) are 400, anything else 500, with its message
    on one line."""
    if isinstance(error, RequestError):
        return error
    message = " ".join(str(getattr(error, "message", error) or type(error).__name__).split())
    status = 400 if getattr(error, "error_code", None) == _INVALID_ARGUMENT else 500
    return RequestError(status, message)
