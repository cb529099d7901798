"""A server for the exports: TensorFlow Serving's REST API, with batching.

`python -m export serve --model_name translator --model_base_path exported/translator`
(`cli/serve_command.py`) serves the numbered versions of one or more
SavedModel exports as `tensorflow_model_server` does, so a client or a
launch script written for one works with the other.  The optional extra
`serve` holds its packages (Starlette, uvicorn, prometheus-client); nothing
here imports them until a server starts (`main.py`).

| module | what |
|---|---|
| `config.py`, `text_proto.py` | the options; TensorFlow Serving's config files in protobuf text format |
| `errors.py` | the statuses and `{"error": ...}` of a request that cannot be answered |
| `tensors.py`, `predict_request.py` | JSON to the signature's arrays and back; the row and columnar formats |
| `batch_keys.py` | which requests may share a batch without changing an answer |
| `signature.py`, `servable.py` | a signature as the server calls it; a loaded, checked, warmed version |
| `batcher.py` | the bounded queues and batches of one signature |
| `model_manager.py` | versions found on disk, loaded in the background, swapped |
| `metrics.py` | Prometheus metrics under TensorFlow Serving's names |
| `app.py`, `page.py`, `page.html` | the ASGI application; the page at `/` |
| `runtime.py`, `main.py` | the running server (uvicorn, threads, signals); starting one |
"""
