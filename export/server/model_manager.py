"""The versions each model serves: found on disk, loaded in the background, swapped.

A model's base path holds numbered folders (`1/`, `2/`, ...; other names
are ignored), as TensorFlow Serving reads them.  Every
`--file_system_poll_wait_seconds` the manager lists them and asks the
model's version policy (`ModelSource.aspired`: the highest by default)
which to serve.  A version to serve is checked, loaded and warmed up in the
loader thread (`Servable.load`, `Servable.warm_up`) while the old one keeps
answering; only then is it put in service, and a version no longer aspired
is taken out (availability first, as TensorFlow Serving's default policy).
Requests already given the old version finish on it.

A version that fails its checks or its load is refused with one log line
and marked END with the error in its status; the versions in service stay.
It is tried again only when its files change (a copy that was still being
written, a file put back).  Versions are reported in TensorFlow Serving's
`GetModelStatus` shape: START, LOADING, AVAILABLE, UNLOADING, END.
"""

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import time

from export.server.batcher import Batcher
from export.server.errors import not_found
from export.server.servable import Servable

LOG = logging.getLogger("export.server")


@dataclasses.dataclass
class VersionStatus:
    """TensorFlow Serving's `ModelVersionStatus` of one version."""

    state: str
    error_code: str = "OK"
    error_message: str = ""

    def as_json(self, version):
        return {"version": str(version), "state": self.state,
                "status": {"error_code": self.error_code,
                           "error_message": self.error_message}}


class ServedVersion:
    """A version in service: its `Servable` and a `Batcher` per signature."""

    def __init__(self, servable, threads, policy, on_batch):
        self.servable = servable
        self.batchers = {
            name: Batcher(signature, threads, policy,
                          on_batch=lambda *batch, name=name: on_batch(
                              servable.model_name, name, *batch))
            for name, signature in servable.signatures.items()}


def version_folders(base_path):
    """{version number: path} of the numbered folders under `base_path`."""
    try:
        names = os.listdir(base_path)
    except OSError:
        return {}
    return {int(name): os.path.join(base_path, name) for name in names
            if name.isdigit() and os.path.isdir(os.path.join(base_path, name))}


def fingerprint(path):
    """The names, sizes and times of the files under `path`: changes when they do."""
    files = []
    for root, _, names in os.walk(path):
        for name in names:
            try:
                stat = os.stat(os.path.join(root, name))
            except OSError:
                continue
            files.append((os.path.relpath(os.path.join(root, name), path), stat.st_size,
                          stat.st_mtime_ns))
    return tuple(sorted(files))


class ModelManager:
    """Every served model's versions.

    Args:
        options: The `ServerOptions`.
        threads: The `BatchThreads` that run the batches.
        policy: The `BatchPolicy` of every signature.
        on_batch: `on_batch(model, signature, rows, requests, seconds, waited)`,
            per batch.
    """

    def __init__(self, options, threads, policy, on_batch):
        self.options = options
        self.threads = threads
        self.policy = policy
        self.on_batch = on_batch
        self.sources = {source.name: source for source in options.models}
        self.served = {name: {} for name in self.sources}  # name -> {version: ServedVersion}
        self.statuses = {name: {} for name in self.sources}  # name -> {version: VersionStatus}
        self._refused = {name: {} for name in self.sources}  # name -> {version: fingerprint}
        self._loader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="loader")

    def version(self, name, version=None):
        """The `ServedVersion` of model `name` (its highest, or `version`)."""
        if name not in self.sources:
            raise not_found(f"Servable not found for request: model {name!r} is not served "
                            f"(served: {', '.join(sorted(self.sources))}).")
        served = self.served[name]
        if version is None:
            if not served:
                raise not_found(f"Servable not found for request: model {name!r} has no "
                                f"version available yet.")
            return served[max(served)]
        if version not in served:
            available = ", ".join(str(v) for v in sorted(served)) or "none"
            raise not_found(f"Servable not found for request: version {version} of model "
                            f"{name!r} is not available (available: {available}).")
        return served[version]

    def status(self, name, version=None):
        """TensorFlow Serving's `GetModelStatus` answer."""
        if name not in self.sources:
            raise not_found(f"Could not find any versions of model {name!r}: it is not served.")
        statuses = self.statuses[name]
        if version is not None:
            if version not in statuses:
                raise not_found(f"Could not find version {version} of model {name!r}.")
            statuses = {version: statuses[version]}
        if not statuses:
            raise not_found(f"Could not find any versions of model {name!r} under its base "
                            f"path {self.sources[name].base_path!r}.")
        return {"model_version_status": [statuses[v].as_json(v)
                                         for v in sorted(statuses, reverse=True)]}

    def ready(self):
        """Whether every model has a version in service."""
        return all(self.served.values())

    async def poll(self):
        """One scan of every base path: loads, refuses and retires versions."""
        for name, source in self.sources.items():
            folders = await asyncio.to_thread(version_folders, source.base_path)
            while True:  # each pass serves or refuses a version: it ends
                candidates = {v: p for v, p in folders.items() if not self._still_refused(
                    name, v, p)}
                aspired = source.aspired(candidates)
                missing = [v for v in aspired if v not in self.served[name]]
                if not missing:
                    break
                for version in missing:
                    await self._load(source, version, candidates[version])
            keep = set(aspired) & set(self.served[name])
            if not keep:
                continue  # nothing aspired could be served: keep what is served
            for version in sorted(set(self.served[name]) - keep):
                self._retire(name, version)

    def _still_refused(self, name, version, path):
        """Whether `version` was refused and its files have not changed since."""
        refused = self._refused[name].get(version)
        return refused is not None and refused == fingerprint(path)

    async def _load(self, source, version, path):
        statuses = self.statuses[source.name]
        statuses[version] = VersionStatus("LOADING")
        started = time.monotonic()
        before = fingerprint(path)
        loop = asyncio.get_running_loop()
        try:
            servable = await loop.run_in_executor(self._loader, self._load_and_warm,
                                                  source.name, version, path)
        except Exception as error:  # noqa: BLE001  (refused, with its reason)
            message = " ".join(str(error).split()).rstrip(".") or type(error).__name__
            code = "DATA_LOSS" if isinstance(error, (ValueError, OSError)) else "UNKNOWN"
            statuses[version] = VersionStatus("END", code, message)
            self._refused[source.name][version] = before
            still = sorted(self.served[source.name])
            LOG.error("model %r version %d refused: %s; %s", source.name, version, message,
                      f"still serving version {still[-1]}" if still else "no version served")
            return
        for note in servable.notes:
            LOG.warning("model %r version %d: %s", source.name, version, note)
        self.served[source.name][version] = ServedVersion(
            servable, self.threads, self.policy, self.on_batch)
        statuses[version] = VersionStatus("AVAILABLE")
        LOG.info("model %r version %d available: %d signatures, loaded and warmed up in "
                 "%.1f s", source.name, version, len(servable.signatures),
                 time.monotonic() - started)

    def _load_and_warm(self, name, version, path):
        servable = Servable.load(name, version, path)
        if self.options.warmup:
            batching = self.options.batching
            servable.warm_up(batching.max_batch_size if batching else 1,
                             self.options.xla_warmup_buckets)
        return servable

    def _retire(self, name, version):
        del self.served[name][version]
        self.statuses[name][version] = VersionStatus("END")
        LOG.info("model %r version %d unloaded", name, version)

    async def poll_forever(self):
        """`poll` every `poll_seconds` (never again if it is 0 or negative)."""
        if self.options.poll_seconds <= 0:
            return
        while True:
            await asyncio.sleep(self.options.poll_seconds)
            try:
                await self.poll()
            except Exception:  # noqa: BLE001  (a scan that fails is retried)
                LOG.exception("scanning the base paths failed")

    def shutdown(self):
        self._loader.shutdown(wait=True, cancel_futures=True)
