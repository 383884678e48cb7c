import json, os
from pytest_dispatch.measurement import instructions
from pytest_dispatch.reference import ReferenceModel, get_config, random_weights

CONFIG = get_config("qwen2.5-0.5b", widths="tiny")


def test_drift(gpu_device):
    if os.environ.get("DRIFT_OTHER_DEVICE"):
        import wgpu
        other = gpu_device
        gpu_device = gpu_device.adapter.request_device_sync(required_limits=dict(gpu_device.limits))
    level, encoding = os.environ.get("DRIFT_MODEL", "eager:submit-per-dispatch").split(":")
    keep = [ReferenceModel(other if os.environ.get("DRIFT_OTHER_DEVICE") else gpu_device, CONFIG, level=l, encoding="single-pass", weights=random_weights(CONFIG, seed=0))
            for l in ("eager", "fused", "fused+")[:int(os.environ.get("DRIFT_EXTRA", "0"))]]
    if os.environ.get("DRIFT_DROP"):
        import gc
        del keep[:]
        gc.collect()
    model = ReferenceModel(gpu_device, CONFIG, level=level, encoding=encoding, weights=random_weights(CONFIG, seed=0))
    model.reset()
    model.forward([1, 2, 3, 4, 5])
    counter = instructions.session_counter()
    assert counter
    retire = instructions.retire_all(gpu_device)
    import wgpu
    buffer = gpu_device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
    sync = lambda: gpu_device.queue.read_buffer(buffer, 0, 4)

    def run(calls):
        for _ in range(calls):
            model.decode_step()
        retire()

    n = int(os.environ.get("DRIFT_WINDOWS", "10"))
    dumps = counter.count(run, [1] * n, sync, warm=int(os.environ.get("DRIFT_WARM", "2")))
    out = [d.instructions for d in dumps]
    print("DRIFT", level, encoding, json.dumps(out))
    with open(os.environ["DRIFT_OUT"], "a") as f:
        f.write(json.dumps({"model": f"{level}:{encoding}", "extra": os.environ.get("DRIFT_EXTRA", "0") + ("-dropped" if os.environ.get("DRIFT_DROP") else "") + ("-otherdevice" if os.environ.get("DRIFT_OTHER_DEVICE") else ""), "windows": out, "by_object": [dict(d.by_object) for d in dumps]}) + "\n")
