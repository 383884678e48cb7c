"""Choosing a WebGPU adapter and describing it (``GpuInfo``, with a stable fingerprint)."""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import importlib
import logging
import os
import re
import shutil
import sys
import tempfile
from typing import Any

from pytest_dispatch.errors import Unavailable
from pytest_dispatch.measurement.typedefs import resolve_typedefs_directly, wgpu_native_ffi

IMPLEMENTATIONS = {"wgpu": "wgpu-native", "dawn": "dawn"}
BACKENDS = ("auto", "vulkan", "metal", "d3d12", "opengl")
_PACKAGES = {"wgpu-native": "wgpu", "dawn": "wgpudawn"}
_INSTALL_HINT = {
    "wgpu-native": "pip install wgpu",
    "dawn": "pip install 'pytest-dispatch[dawn]'",
}
# Adapter types from most to least preferred when several match.
_TYPE_RANK = {"discretegpu": 0, "integratedgpu": 1, "virtualgpu": 2, "cpu": 3}
# Features a test may need; the device gets each one the adapter has.
WANTED_FEATURES = (
    "shader-f16",
    "timestamp-query",
    "timestamp-query-inside-passes",
    "timestamp-query-inside-encoders",
    "subgroup",
)
# Limits raised to the adapter's maximum, so large models fit.  The others keep
# WebGPU's defaults, so kernels that exceed a portable limit fail here too.
# More storage buffers per stage let the reference model bind a whole layer at once.
RAISED_LIMITS = ("max-buffer-size", "max-storage-buffer-binding-size", "max-storage-buffers-per-shader-stage")




@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """What runs the dispatches.  ``fingerprint`` keys baselines: equal fingerprints
    mean comparable per-dispatch timings."""

    implementation: str  # "wgpu-native" or "dawn"
    implementation_version: str  # the Python package's version (it pins the native library)
    backend: str  # "Vulkan", "Metal", "D3D12", "OpenGL", "Null"
    adapter_name: str  # e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)"
    vendor: str  # the adapter's vendor name, as the driver gives it
    vendor_id: int  # PCI vendor id (0x10de NVIDIA), 0 when unknown
    device_id: int  # PCI device id, 0 when unknown
    driver: str  # the adapter's description, e.g. "Mesa 22.3.6 (LLVM 15.0.6)"
    adapter_type: str  # "DiscreteGPU", "IntegratedGPU", "CPU", ...
    features: frozenset[str] = frozenset()  # the adapter's WebGPU features, e.g. shader-f16

    @property
    def fingerprint(self) -> str:
        """A file-name-safe id from the fields that change performance."""
        stable = (
            self.implementation,
            self.implementation_version,
            self.backend,
            self.adapter_name,
            f"{self.vendor_id:04x}:{self.device_id:04x}",
            self.driver,
            self.adapter_type,
        )
        digest = hashlib.sha256("\x1f".join(stable).encode()).hexdigest()[:10]
        name = re.sub(r"[^a-z0-9]+", "-", f"{self.adapter_name} {self.backend}".lower()).strip("-")
        return f"{name[:48]}-{digest}"

    @property
    def is_cpu(self) -> bool:
        """True for CPU emulation (lavapipe, SwiftShader): timings are indicative only."""
        return self.adapter_type.lower() == "cpu"

    def describe(self) -> str:
        """One line for headers: adapter, backend, type, implementation, driver."""
        driver = f", driver {self.driver}" if self.driver else ""  # a browser does not name its driver
        return f"{self.adapter_name} ({self.adapter_type}) via {self.backend}, " \
               f"{self.implementation} {self.implementation_version}{driver}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the fingerprint."""
        data = dataclasses.asdict(self)
        data["features"] = sorted(self.features)
        data["fingerprint"] = self.fingerprint
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GpuInfo":
        """The inverse of ``as_dict`` (extra keys, such as the fingerprint, are ignored)."""
        fields = {key: value for key, value in data.items() if key in cls.__dataclass_fields__}
        return cls(**{**fields, "features": frozenset(fields.get("features") or ())})

    def __repr__(self) -> str:  # short, for tracebacks that show fixture values
        return f"GpuInfo({self.describe()!r})"


@dataclasses.dataclass(frozen=True)
class AdapterRequest:
    """The user's choice, from --gpu-impl/--gpu-backend/--gpu-adapter."""

    impl: str = "wgpu"
    backend: str = "auto"
    adapter: str = ""

    def describe(self) -> str:
        parts = [f"{IMPLEMENTATIONS.get(self.impl, self.impl)}", f"backend {self.backend}"]
        if self.adapter:
            parts.append(f"adapter matching {self.adapter!r}")
        return ", ".join(parts)


def ensure_runtime_dir() -> None:
    """Give this process a private XDG_RUNTIME_DIR when it has none.

    Without one, Mesa prints "error: XDG_RUNTIME_DIR is invalid or not set" each time
    an instance is created (twice per session, twenty times in ``probe``)."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if os.name != "posix" or (current and os.path.isdir(current)):
        return
    path = tempfile.mkdtemp(prefix="pytest-dispatch-xdg-")  # mode 0700, as the XDG spec asks
    os.environ["XDG_RUNTIME_DIR"] = path
    atexit.register(shutil.rmtree, path, ignore_errors=True)


def import_implementation(implementation: str):
    """Import an implementation's package (and wgpu-native's backend); its module."""
    module = importlib.import_module(_PACKAGES[implementation])
    if implementation == "wgpu-native":
        importlib.import_module("wgpu.backends.auto")
        resolve_typedefs_directly(wgpu_native_ffi())  # its struct types looked up, not parsed: a quicker start
    return module


def gpu_entry(implementation: str):
    """The ``gpu`` object of an implementation's package (``wgpu.gpu`` or ``wgpudawn.gpu``)."""
    ensure_runtime_dir()
    try:
        module = import_implementation(implementation)
    except ImportError as error:
        raise Unavailable(
            f"{implementation} is not installed ({error}); {_INSTALL_HINT[implementation]}"
        ) from None
    except Exception as error:  # the native library failed to load
        raise Unavailable(f"{implementation} failed to load: {_one_line(error)}") from None
    return module.gpu


def _summary(adapter) -> str:
    info = adapter.info
    return f"{info.get('device') or '?'} ({info.get('adapter_type')}, {info.get('backend_type')})"


def select_adapter(request: AdapterRequest):
    """Return the best adapter for ``request`` or raise Unavailable naming what was tried."""
    if request.impl not in IMPLEMENTATIONS:
        raise ValueError(f"--gpu-impl must be one of {sorted(IMPLEMENTATIONS)}, not {request.impl!r}")
    if request.backend not in BACKENDS:
        raise ValueError(f"--gpu-backend must be one of {list(BACKENDS)}, not {request.backend!r}")
    implementation = IMPLEMENTATIONS[request.impl]
    gpu = gpu_entry(implementation)
    tried = f"tried {request.describe()}"
    if request.backend == "auto" and not request.adapter:
        # Let the implementation choose, so its own environment variables
        # (e.g. WGPU_BACKEND_TYPE=Null) keep working.
        try:
            chosen = gpu.request_adapter_sync(power_preference="high-performance")
        except Exception as error:  # wgpu raises plain RuntimeError here
            raise Unavailable(f"no WebGPU adapter: {tried}: {_one_line(error)}; {_hint()}") from None
        if compute_unavailable_reason(chosen) is None:
            return chosen
    try:
        adapters = list(gpu.enumerate_adapters_sync())
    except Exception as error:
        raise Unavailable(f"no WebGPU adapter: {tried}: {_one_line(error)}; {_hint()}") from None
    matching = [
        adapter
        for adapter in adapters
        if (request.backend == "auto" or adapter.info.get("backend_type", "").lower() == request.backend)
        and request.adapter.lower() in _searchable(adapter) and compute_unavailable_reason(adapter) is None
    ]
    if not matching:
        found = "; ".join(_summary(a) + (f": {compute_unavailable_reason(a)}" if compute_unavailable_reason(a)
                                         else "") for a in adapters) or "none"
        raise Unavailable(f"no WebGPU adapter: {tried}; found: {found}")
    return min(matching, key=lambda a: _TYPE_RANK.get(a.info.get("adapter_type", "").lower(), 9))


def identical_adapters(adapter, implementation: str = "wgpu-native") -> list:
    """Every adapter of this host with ``adapter``'s fingerprint (e.g. both GPUs of a
    two-H200 host), in enumeration order; ``[adapter]`` when enumeration fails."""
    fingerprint = gpu_info(adapter, implementation).fingerprint
    try:
        candidates = list(gpu_entry(implementation).enumerate_adapters_sync())
    except Exception:  # the adapter we have is still usable
        return [adapter]
    twins = [a for a in candidates if gpu_info(a, implementation).fingerprint == fingerprint]
    return twins or [adapter]


def _searchable(adapter) -> str:
    info = adapter.info
    return " ".join(str(info.get(key, "")) for key in ("device", "vendor", "description", "architecture")).lower()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _hint() -> str:
    if os.name == "posix" and not os.path.exists("/usr/share/vulkan/icd.d"):
        return "no Vulkan driver is installed: on Debian/Ubuntu, apt-get install mesa-vulkan-drivers gives lavapipe"
    return "check the GPU driver, or pass --gpu-backend/--gpu-adapter"


def gpu_info(adapter, implementation: str | None = None) -> GpuInfo:
    """Describe an adapter (of either implementation)."""
    module = type(adapter).__module__
    implementation = implementation or ("dawn" if module.startswith("wgpudawn") else "wgpu-native")
    package = importlib.import_module(_PACKAGES[implementation])
    info = adapter.info
    return GpuInfo(
        implementation=implementation,
        implementation_version=str(getattr(package, "__version__", "?")),
        backend=str(info.get("backend_type", "?")),
        adapter_name=str(info.get("device", "") or "?"),
        vendor=str(info.get("vendor", "")),
        vendor_id=int(info.get("vendor_id", 0) or 0),
        device_id=int(info.get("device_id", 0) or 0),
        driver=str(info.get("description", "")),
        adapter_type=str(info.get("adapter_type", "?")),
        features=frozenset(str(f) for f in adapter.features),
    )


# Compute work needs these limits above zero; a downlevel adapter without compute shaders has them at 0.
_COMPUTE_LIMITS = ("max-compute-workgroups-per-dimension", "max-compute-invocations-per-workgroup",
                   "max-storage-buffers-per-shader-stage")


def compute_unavailable_reason(adapter) -> str | None:
    """Why ``adapter`` cannot run compute work, judged from its limits; None when it can."""
    limits = adapter.limits
    missing = [name for name in _COMPUTE_LIMITS if name in limits and not limits[name]]
    return f"no compute shaders ({missing[0]} is 0)" if missing else None


def request_device(adapter, label: str = "pytest-dispatch"):
    """A device with the adapter's useful features and its maximum buffer sizes, as the
    ``gpu_device`` fixture's: for a test module that needs a device of its own (a fixture named
    ``gpu_device`` in the module, which ``dispatch_meter`` then measures on).

    An adapter that cannot run compute work raises Unavailable, one line saying why
    (what wgpu logged or raised, without its traceback)."""
    reason = compute_unavailable_reason(adapter)
    if reason:
        raise Unavailable(f"{_summary(adapter)} cannot run compute work: {reason}")
    features = [f for f in WANTED_FEATURES if f in adapter.features]
    limits = {name: adapter.limits[name] for name in RAISED_LIMITS if name in adapter.limits}
    logged = _ErrorLog()
    # wgpu-py makes its "wgpu" logger of its own class at import and asserts it did: with Dawn,
    # wgpu may not be imported yet, and a plain logger made here would fail that import later.
    wgpu_logger = logging.getLogger("wgpu") if "wgpu" in sys.modules else logging.getLogger("pytest_dispatch.unused")
    wgpu_logger.addFilter(logged)  # a logger's filter runs before its handlers: the error is ours to report
    try:
        device = adapter.request_device_sync(label=label, required_features=features, required_limits=limits)
    except Exception as error:
        said = logged.messages[0] if logged.messages else _one_line(error)
        raise Unavailable(f"{_summary(adapter)} cannot run compute work: "
                          f"{_one_line(RuntimeError(said))}") from None
    finally:
        wgpu_logger.removeFilter(logged)
    for message in logged.messages:  # the device came: what was logged is not ours to hide
        wgpu_logger.error(message)
    return device


class _ErrorLog(logging.Filter):
    """Keeps the wgpu errors logged while a device is requested, instead of printing them."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        self.messages.append(record.getMessage().strip())
        return False
