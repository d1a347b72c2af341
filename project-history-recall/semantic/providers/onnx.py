"""``local``: an ONNX sentence-embedding model in-process (``model.onnx`` + ``tokenizer.json``),
with the optional ``onnxruntime`` and ``tokenizers`` packages (imported on first use). The
loaded models, the files' digests and the inference threads are the process's
(:class:`LocalModels`, owned by the plugin's ``ProcessState``)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config_schema import EmbeddingSettings
from ...store import hint, install_command
from .base import Counters, EmbeddingUnavailable, fingerprint_of, normalise, prepare_texts, shorten

if TYPE_CHECKING:
    import numpy

#: Texts per ONNX run: small runs keep the activations in cache (docs/benchmarks.md, "Code
#: choices"). ``batch_size`` (meant for an HTTP endpoint) does not change it.
LOCAL_RUN_BATCH = 8


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _max_length(folder: Path) -> int:
    """The model's token limit: sentence-transformers' own setting first, else the tokenizer's, else 512.

    ``tokenizer.json`` files exported from sentence-transformers often carry a smaller truncation
    (all-MiniLM-L6-v2's says 128 while the model was trained at 256), so it is not the source.
    """
    limit = 0
    for name, key in (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        value = _read_json(folder / name).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 65536:
            limit = value
            break
    limit = limit or 512
    positions = _read_json(folder / "config.json").get("max_position_embeddings")
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0:
        limit = min(limit, positions)
    return limit


@dataclass
class _LocalModel:
    """One loaded ONNX model and tokenizer, shared by every embedder on the same folder.

    Two sessions of the same graph. ``session`` is created without graph optimisation: much
    quicker to create, slower per query. It answers the first query of a process only (a ``hermes
    chat -q`` usually makes one search); every later query and every document batch uses the
    optimised session, created on first need (:meth:`optimised`). Building that one in a thread
    instead holds the GIL and stalls the search it was meant to overlap. The two sessions'
    vectors agree to float precision (docs/benchmarks.md, "Code choices").
    """

    session: Any
    tokenizer: Any
    input_names: tuple[str, ...]
    output_name: str
    pooled: bool
    cls_pooling: bool
    max_length: int
    pad_id: int
    model_sha256: str
    tokenizer_sha256: str
    workers: int = 1  # ONNX runs at once (one per core)
    model_file: str = ""
    _optimised: Any = None
    _quick_used: bool = False
    _lock: Any = field(default_factory=threading.Lock)

    def optimised(self) -> Any:
        """The optimised session, created on first call."""
        with self._lock:
            if self._optimised is None:
                self._optimised = _ort_session(self.model_file, optimised=True)
                self.session = self._optimised  # the quick one is no longer needed
            return self._optimised

    def for_query(self) -> Any:
        """The quick session for the process's first query, the optimised one after that."""
        with self._lock:
            if self._optimised is None and not self._quick_used:
                self._quick_used = True
                return self.session
        return self.optimised()


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _local_files(model_path: str) -> tuple[Path, Path, Path]:
    if not model_path:
        raise EmbeddingUnavailable(
            "embedding.provider is local but embedding.model_path is not set: point it at a folder "
            "holding model.onnx and tokenizer.json"
        )
    folder = Path(model_path).expanduser()
    model, tokenizer = folder / "model.onnx", folder / "tokenizer.json"
    missing = [p.name for p in (model, tokenizer) if not p.is_file()]
    if missing:
        raise EmbeddingUnavailable(f"embedding.model_path {str(folder)!r} lacks {' and '.join(missing)}")
    return folder, model, tokenizer


def _ort_session(model_file: str, optimised: bool) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # One thread per run, and as many runs at once as there are cores (see _embed): on
    # MiniLM's small matrices, splitting one run over threads gained little and spinning
    # threads lost ~40 % whenever another process had a core; separate runs scale.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # int8 models warn about unused initialisers otherwise
    if not optimised:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model_file, sess_options=options, providers=["CPUExecutionProvider"])


class LocalModels:
    """The process's loaded ONNX models (per folder and file version), the digests of their files,
    and one pool of inference threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # held while a model loads (file_sha256 takes _lock)
        self._models: dict[tuple[str, int, int], _LocalModel] = {}
        self._digests: dict[tuple[str, int, int], str] = {}
        self._pool: ThreadPoolExecutor | None = None

    def pool(self, workers: int) -> ThreadPoolExecutor:
        """One process-wide pool of inference threads (created on first use)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(workers, thread_name_prefix="project-history-onnx")
            return self._pool

    def file_sha256(self, path: Path) -> str:
        """sha256 of a file, remembered by (path, size, mtime): hashing 20-90 MB once a process."""
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        with self._lock:
            cached = self._digests.get(key)
        if cached:
            return cached
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        value = digest.hexdigest()
        with self._lock:
            self._digests[key] = value
        return value

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._models.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def load(self, model_path: str) -> _LocalModel:
        """Load (once per process per folder and file version) the session and tokenizer."""
        folder, model_file, tokenizer_file = _local_files(model_path)
        stat = model_file.stat()
        key = (str(folder.resolve()), stat.st_size, stat.st_mtime_ns)
        with self._load_lock:
            if key in self._models:
                return self._models[key]
            try:
                import onnxruntime  # noqa: F401  (imported here so that a missing runtime is reported)
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbeddingUnavailable(
                    f"the local embedding provider needs onnxruntime and tokenizers ({exc}); run "
                    f"{hint('project-history', 'setup', 'local')}, or: "
                    f"{install_command('onnxruntime', 'tokenizers')}"
                ) from None

            max_length = _max_length(folder)
            try:
                tokenizer = Tokenizer.from_file(str(tokenizer_file))
                tokenizer.no_padding()  # padded per batch below, to the batch's own longest text
                tokenizer.enable_truncation(max_length=max_length)
                session = _ort_session(str(model_file), optimised=False)
            except Exception as exc:
                raise EmbeddingUnavailable(
                    f"could not load the local model in {str(folder)!r}: "
                    f"{type(exc).__name__}: {shorten(str(exc))}"
                ) from None

            input_names = tuple(i.name for i in session.get_inputs())
            if "input_ids" not in input_names:
                raise EmbeddingUnavailable(f"{model_file} has no input_ids input (inputs: {input_names})")
            outputs = {o.name: o for o in session.get_outputs()}
            if "sentence_embedding" in outputs:
                output_name, pooled = "sentence_embedding", True
            else:
                output_name = "last_hidden_state" if "last_hidden_state" in outputs else next(iter(outputs))
                pooled = len(outputs[output_name].shape or ()) == 2
            pooling = _read_json(folder / "1_Pooling" / "config.json")
            padding = tokenizer.padding or {}
            pad_id = padding.get("pad_id")
            if not isinstance(pad_id, int):
                pad_id = tokenizer.token_to_id("[PAD]") or tokenizer.token_to_id("<pad>") or 0
            loaded = _LocalModel(
                session=session,
                tokenizer=tokenizer,
                input_names=input_names,
                output_name=output_name,
                pooled=pooled,
                cls_pooling=bool(pooling.get("pooling_mode_cls_token"))
                and not pooling.get("pooling_mode_mean_tokens"),
                max_length=max_length,
                pad_id=pad_id,
                model_sha256=self.file_sha256(model_file),
                tokenizer_sha256=self.file_sha256(tokenizer_file),
                workers=_cores(),
                model_file=str(model_file),
            )
            self._models[key] = loaded
            return loaded


class LocalOnnxEmbedder(Counters):
    """``local``: tokenise, run the ONNX model, pool over the attention mask, normalise."""

    def __init__(self, embedding: EmbeddingSettings, models: LocalModels | None = None) -> None:
        super().__init__()
        self._settings = embedding
        self._models = models or LocalModels()
        self._model = self._models.load(embedding.model_path)
        model = self._model
        self._where = f"local model {embedding.model_path!r}"
        #: Word-pieces the model reads; the rest of a text is cut off (the indexer sizes chunks by it).
        self.max_input_tokens = model.max_length
        self.fingerprint = fingerprint_of(
            "local",
            model.model_sha256[:12],
            {
                # The folder's path is left out on purpose: moving it does not change a vector.
                "model_sha256": model.model_sha256,
                "tokenizer_sha256": model.tokenizer_sha256,
                "max_length": model.max_length,
                "pooling": "model" if model.pooled else ("cls" if model.cls_pooling else "mean"),
                "query_prefix": embedding.query_prefix,
                "document_prefix": embedding.document_prefix,
            },
        )

    # ``deadline`` is accepted for the common interface; in-process inference of one batch is not
    # interruptible and takes milliseconds to a second, which the search budget allows for.
    def embed_documents(
        self, texts: Sequence[str], deadline: float | None = None, timeout: float | None = None
    ) -> numpy.ndarray:
        return self._embed(prepare_texts(texts, self._settings.document_prefix), bulk=True)

    def embed_query(self, text: str, deadline: float | None = None) -> numpy.ndarray:
        return self._embed(prepare_texts([text], self._settings.query_prefix), bulk=False)[0]

    def _embed(self, texts: list[str], bulk: bool) -> numpy.ndarray:
        """Tokenise all, then run length-sorted batches so short texts are not padded to long ones."""
        import numpy as np

        model = self._model
        if not texts:
            width = next(o for o in model.session.get_outputs() if o.name == model.output_name).shape[-1]
            return np.zeros((0, width if isinstance(width, int) else 0), dtype=np.float32)
        with self._running_in_process(self._where, len(texts)):
            encodings = model.tokenizer.encode_batch(texts)
            order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
            runs = [order[i : i + LOCAL_RUN_BATCH] for i in range(0, len(order), LOCAL_RUN_BATCH)]
            session = model.optimised() if bulk else model.for_query()
            work = [(session, [encodings[i] for i in rows]) for rows in runs]
            if len(runs) > 1 and model.workers > 1:  # onnxruntime runs without the GIL: all cores
                results = list(self._models.pool(model.workers).map(lambda job: self._run(*job), work))
            else:
                results = [self._run(*job) for job in work]
            out = np.empty((len(texts), results[0].shape[1]), dtype=np.float32)
            for rows, vectors in zip(runs, results, strict=True):
                out[rows] = vectors
        return normalise(out, self._where)

    def _run(self, session: Any, encodings: list[Any]) -> numpy.ndarray:
        import numpy as np

        model = self._model
        length = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), length), model.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), length), dtype=np.int64)
        types = np.zeros((len(encodings), length), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n] = encoding.ids
            mask[row, :n] = encoding.attention_mask
            types[row, :n] = encoding.type_ids
        available = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {name: available[name] for name in model.input_names if name in available}
        (hidden,) = session.run([model.output_name], feeds)
        hidden = np.asarray(hidden, dtype=np.float32)
        if model.pooled or hidden.ndim == 2:
            return hidden
        if model.cls_pooling:
            return hidden[:, 0, :]
        weights = mask[:, :, None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
