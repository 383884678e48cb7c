"""A web app's inference gated in CI: ONNX Runtime Web and TensorFlow.js on WebGPU, in headless Chromium.

The model is a two-layer MLP (MatMul, Add, Relu, MatMul, Add) built at test time with
``onnx.helper`` from seeded weights.  ``inference.html`` runs it with ONNX Runtime Web (both of
its WebGPU paths: the native WebGPU EP and the JavaScript EP) and, from the same weights, with
TensorFlow.js's WebGPU backend; ``proxy.html`` runs ORT in its proxy worker, made from a Blob
URL.  Each test counts the WebGPU dispatches of one inference run, by
kernel, and pins them with ``dispatch_budget``: a library upgrade or a model export that loses a
fusion adds dispatches, and the test fails saying which kernels.  docs/browser_libraries.md
explains the set-up.

The npm packages are pinned in package.json and package-lock.json and installed here, on first
use, with ``npm ci`` (into node_modules beside this file; ../conftest.py).  The tests skip with one line where
onnx, npm (or the registry) or Chromium is missing.  Run them with the report:

    pytest examples/browser/onnx --dispatch-report
"""

from pathlib import Path

import numpy as np
import pytest

from pytest_dispatch import exact

onnx = pytest.importorskip("onnx", reason="this example builds its model with onnx: pip install onnx")

HERE = Path(__file__).resolve().parent
INPUT, HIDDEN, OUTPUT = 16, 32, 8
X = np.linspace(-1.0, 1.0, INPUT, dtype=np.float32)
NPM_TIMEOUT = 600  # seconds: onnxruntime-web and tfjs are a few hundred MB unpacked

pytestmark = [pytest.mark.usefixtures("node_modules"),  # first: without npm, skip before starting a browser
              pytest.mark.dispatch_timing(max_time="0.5s")]  # CI gates the counts: little time on timing


# ONNX Runtime Web's two WebGPU paths: its build names the WebAssembly module it loads.
NATIVE_EP = "ort.webgpu.min.mjs"  # the WebGPU EP in C++ (ort-wasm-simd-threaded.asyncify.wasm)
JSEP = "ort.min.mjs"  # the JavaScript EP, kernels written in TypeScript (ort-wasm-simd-threaded.jsep.wasm)


def mlp_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"w1": rng.standard_normal((INPUT, HIDDEN), dtype=np.float32),
            "b1": rng.standard_normal(HIDDEN, dtype=np.float32),
            "w2": rng.standard_normal((HIDDEN, OUTPUT), dtype=np.float32),
            "b2": rng.standard_normal(OUTPUT, dtype=np.float32)}


def mlp_model(weights: dict[str, np.ndarray]) -> bytes:
    """The ONNX model: y = relu(x @ w1 + b1) @ w2 + b2, five nodes."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["xw1"]), helper.make_node("Add", ["xw1", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["relu"]), helper.make_node("MatMul", ["relu", "w2"], ["rw2"]),
             helper.make_node("Add", ["rw2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, INPUT])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, OUTPUT])],
                              [numpy_helper.from_array(array, name) for name, array in weights.items()])
    # opset 17 and IR version 8: what onnxruntime-web 1.31 reads, whichever onnx wrote the file
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def expected_output(weights: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(X @ weights["w1"] + weights["b1"], 0) @ weights["w2"] + weights["b2"]


@pytest.fixture(scope="session")
def weights() -> dict[str, np.ndarray]:
    return mlp_weights()


@pytest.fixture
def inference_page(gpu_page):
    return gpu_page.open(HERE, "inference.html")


def ort_session(page, weights, build, optimization="all"):
    """ONNX Runtime Web's inference session of the MLP in the page; returns the run, a page function."""
    page.function("ortLoad", list(mlp_model(weights)), build, optimization, name="ortLoad")()
    return page.function("ortRun", X.tolist(), name=f"ortRun {build}")


# Why 3: ORT's graph optimizer (graphOptimizationLevel "all", its default) fuses each MatMul with
# the Add after it into one Gemm node, and each node runs as one WebGPU program: Gemm, Relu, Gemm.
# Without that fusion (optimization "disabled", or an export that splits the pattern) each of the
# five nodes is a dispatch, and the budget fails naming the kernels. The JavaScript EP calls its
# Gemm program "GemmShared".
@pytest.mark.dispatch_budget(dispatches=exact(3))
@pytest.mark.parametrize("build, kernels", [(NATIVE_EP, {"Gemm": 2, "Relu": 1}),
                                            (JSEP, {"GemmShared": 2, "Relu": 1})], ids=["webgpu-ep", "jsep"])
def test_onnx_runtime_web_runs_the_mlp_in_three_dispatches(dispatch_meter, inference_page, weights, build, kernels):
    run = ort_session(inference_page, weights, build)
    np.testing.assert_allclose(run(), expected_output(weights), rtol=1e-4, atol=1e-4)
    measurement = dispatch_meter.measure(run)
    assert measurement.by_kernel == kernels

    # Every run after the first (which compiles the pipelines) makes the same WebGPU calls,
    # of every kind (passes, submits, writes, copies, readbacks), not only the same dispatches.
    runs = [run.count() for _ in range(3)]
    calls = [(counts.calls, counts.by_kernel) for counts in runs]
    assert calls[0][1] == kernels and calls[1:] == calls[:1] * 2, calls

    # Each node a dispatch without the optimizer: what the budget would catch.
    unoptimized = ort_session(inference_page, weights, build, optimization="disabled")
    assert unoptimized.count().by_kernel == {"MatMul": 2, "Add": 2, "Relu": 1}


# Why 2: TensorFlow.js's WebGPU backend runs each op as one program; tf.fused.matMul takes the
# bias and the activation into the matMul's program, one per layer. Unfused, the same MLP is 5
# (matMul, add, relu, matMul, add).
@pytest.mark.dispatch_budget(dispatches=exact(2))
def test_tensorflow_js_runs_the_same_mlp_fused_in_two_dispatches(dispatch_meter, inference_page, weights):
    params = {name: [list(array.shape), array.ravel().tolist()] for name, array in weights.items()}
    assert inference_page.function("tfLoad", params, name="tfLoad")() == "webgpu"
    fused = inference_page.function("tfRun", X.tolist(), True, name="tfRun fused")
    np.testing.assert_allclose(fused(), expected_output(weights), rtol=1e-4, atol=1e-4)
    assert dispatch_meter.measure(fused).by_kernel == {"MatMulReduceProgram": 2}

    ops = inference_page.function("tfRun", X.tolist(), False, name="tfRun")
    np.testing.assert_allclose(ops(), expected_output(weights), rtol=1e-4, atol=1e-4)
    assert ops.count().by_kernel == {"MatMulReduceProgram": 2, "BinaryOpProgram": 2, "UnaryOpProgram": 1}


# ORT's proxy option runs the session in a worker of ORT's own; with ORT loaded from a Blob URL (as
# a bundler inlines it), that worker is made from a Blob URL too. The recorder is in it before its
# first script, so the same 3 dispatches are counted there, not 0.
@pytest.mark.dispatch_budget(dispatches=exact(3))
def test_onnx_runtime_web_in_its_proxy_worker_from_a_blob_url(dispatch_meter, gpu_page, weights):
    page = gpu_page.open(HERE, "proxy.html")
    page.function("ortLoad", list(mlp_model(weights)), name="ortLoad")()
    run = page.function("ortRun", X.tolist(), name="ortRun proxied")
    np.testing.assert_allclose(run(), expected_output(weights), rtol=1e-4, atol=1e-4)
    assert dispatch_meter.measure(run).by_kernel == {"GemmShared": 2, "Relu": 1}
    assert page.evaluate("__dispatch.own().by_kernel") == {}  # none in the page itself: all in the worker
