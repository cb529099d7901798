"""The command line: `python -m training` and `python -m export`.

The one package that imports both `training` and `export`; the packages'
`__main__.py` entry scripts hand over to it.

- `training_commands`, `export_commands`: the parsers and `main`, light
  enough that `--help` loads no TensorFlow.
- `serve_command`: `python -m export serve`'s flags (TensorFlow Serving's)
  and the `ServerOptions` they give, read without TensorFlow.
- `training_handlers`, `export_handlers`: what each command runs, imported
  by `main` once the arguments are parsed.
- `main_job`: the README's main job (train, evaluate, export, serve one
  request over HTTP).
- `config_help`: the config fields' help, read from `training.config`.
- `errors`: `error: <message>` and exit status 2 for a user's mistake.
- `quiet`: TensorFlow imported without its start-up lines.
"""
