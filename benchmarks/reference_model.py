"""Tokens/s, TTFT and dispatches/token of the WGSL reference transformer, per level x encoding.

The paper's end-to-end method (greedy decode, batch 1, a 5-token prompt): TTFT is one
prefill forward of the prompt up to its first token read back; tokens/s is the decode of
``--tokens`` more tokens, one forward each. Rows with loop ``host`` are the paper's: the
host reads each token back (4 bytes, the sync) and feeds it to the next forward. Rows with
loop ``gpu xK`` use ``generate(..., tokens_per_submit=K)``: tokens stay on the GPU, K
forwards per submission, one readback per submission; there tokens/s is ``--tokens`` over
the time of ``generate(prompt, 1 + tokens)`` less that of ``generate(prompt, 1)`` (the TTFT).
Each row is measured in one run per repetition: warm-up repetitions are discarded, the rest
give mean and standard deviation. Dispatches/token are the dispatches the model encoded
in one decode step, counted by the recorder outside the timed runs.

``--peer torch`` adds rows for Hugging Face transformers' Qwen2 on PyTorch CUDA with the same
weights (eager; ``--peer-compile`` also tries ``torch.compile``), measured the same way (the
token to the host each step); dispatches/token there are the CUDA kernels of one decode step.

    python benchmarks/reference_model.py --config tiny
    python benchmarks/reference_model.py --config qwen2.5-0.5b --runs 10 --json results.json
    python benchmarks/reference_model.py --config qwen2.5-0.5b --dtype f16 --peer torch --kernel-times

A checkpoint folder (config.json, *.safetensors, tokenizer.json with the 'hf' extra) runs from a
cold start instead: the time to load it, build the model and read back the first token, the
peak resident memory beside the checkpoint's size on disk, then the text and tokens/s.
``--load-only`` stops after converting every tensor once (the loader's own memory);
``--write-checkpoint DIR`` writes random weights of ``--config`` there as a bfloat16 checkpoint:

    python benchmarks/reference_model.py --config qwen2.5-0.5b --write-checkpoint /tmp/q05
    python benchmarks/reference_model.py --checkpoint /tmp/q05 --load-only
    python benchmarks/reference_model.py --checkpoint ~/models/Qwen2.5-0.5B-Instruct --dtype f16 --prompt "Hello"
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # the cold start: before numpy, wgpu and the model are imported

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import wgpu  # noqa: E402

from pytest_dispatch import count_dispatches  # noqa: E402
from pytest_dispatch.errors import Unavailable  # noqa: E402
from pytest_dispatch.measurement import gpu, recorder  # noqa: E402
from pytest_dispatch.reference import (  # noqa: E402
    CONFIGS,
    DTYPES,
    ENCODINGS,
    LEVELS,
    ReferenceModel,
    get_config,
    hf_config,
    load_pretrained,
    load_weights,
    random_weights,
)
from pytest_dispatch.reference.graph import weight_names  # noqa: E402
from roofline import bare_read_us, copy_bandwidth  # noqa: E402  (beside this script)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="tiny", choices=sorted(CONFIGS))
    parser.add_argument("--widths", default=None, choices=sorted(CONFIGS), help="take the widths of this config")
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma-separated, from %(default)s")
    parser.add_argument("--encodings", default=",".join(ENCODINGS), help="comma-separated, from %(default)s")
    parser.add_argument("--dtype", default="f32", choices=DTYPES)
    parser.add_argument("--tokens", type=int, default=50, help="tokens decoded after the first (default 50)")
    parser.add_argument("--prompt-len", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5, help="timed repetitions per row")
    parser.add_argument("--warmup", type=int, default=1, help="discarded repetitions per row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the rows and the setup as JSON")
    parser.add_argument("--plot", metavar="PATH", help="also draw dispatches and tokens/s per row as SVG "
                        "(needs matplotlib: the 'plot' extra)")
    parser.add_argument("--kernel-times", action="store_true",
                        help="also print GPU time, GB/s and %% of the copy bandwidth per kernel of a decode step, "
                             "and the time of a bare read of each kernel's weight bytes")
    parser.add_argument("--tokens-per-submit", default="50", metavar="K,...",
                        help="GPU-resident rows, one per K (default %(default)s; '' for none)")
    parser.add_argument("--impl", default="wgpu", choices=sorted(gpu.IMPLEMENTATIONS),
                        help="WebGPU implementation: wgpu (wgpu-native) or dawn")
    parser.add_argument("--peer", choices=["torch"], help="add rows for transformers' Qwen2 on PyTorch CUDA")
    parser.add_argument("--peer-compile", action="store_true", help="with --peer torch, also try torch.compile")
    parser.add_argument("--checkpoint", metavar="DIR", help="run this Hugging Face checkpoint folder from a cold "
                        "start (--level, --dtype, --tokens, --prompt) instead of the table")
    parser.add_argument("--prompt", help="with --checkpoint: the text to continue (needs tokenizer.json and the "
                        "'hf' extra); without it, --prompt-len random token ids")
    parser.add_argument("--level", default="fused+", choices=LEVELS, help="with --checkpoint (default %(default)s)")
    parser.add_argument("--load-only", action="store_true", help="with --checkpoint: load and convert each "
                        "tensor once, print the peak memory, build no model")
    parser.add_argument("--write-checkpoint", metavar="DIR", help="write random weights of --config to DIR as a "
                        "bfloat16 safetensors checkpoint, then exit")
    args = parser.parse_args(argv)
    args.levels = _choices(parser, "--levels", args.levels, LEVELS)
    args.encodings = _choices(parser, "--encodings", args.encodings, ENCODINGS)
    try:
        args.tokens_per_submit = [int(k) for k in args.tokens_per_submit.split(",") if k.strip()]
    except ValueError:
        parser.error(f"--tokens-per-submit: {args.tokens_per_submit!r} is not a comma-separated list of integers")
    if any(k < 1 for k in args.tokens_per_submit):
        parser.error("--tokens-per-submit: every K must be >= 1")
    return args


def _choices(parser, flag, value, allowed):
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        parser.error(f"{flag}: unknown {unknown}; choose from {','.join(allowed)}")
    return chosen


def request_device(dtype: str, impl: str = "wgpu"):
    """The plugin's adapter choice and device (maximum buffer sizes, shader-f16 when present)."""
    try:
        adapter = gpu.select_adapter(gpu.AdapterRequest(impl=impl))
    except Unavailable as error:
        sys.exit(str(error))
    device = gpu.request_device(adapter)
    if dtype == "f16" and "shader-f16" not in device.features:
        sys.exit(f"--dtype f16 needs shader-f16, which {adapter.info['device']} lacks")
    return adapter, device


def measure(model: ReferenceModel, prompt: list[int], n_decode: int) -> tuple[float, float]:
    """One repetition: (TTFT seconds, decode seconds)."""
    model.reset()
    start = time.perf_counter()
    model.forward(prompt)
    ttft = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n_decode):
        model.decode_step()
    return ttft, time.perf_counter() - start


def measure_resident(model: ReferenceModel, prompt: list[int], n_decode: int, k: int) -> tuple[float, float]:
    """One repetition of the GPU-resident loop: (TTFT seconds, decode seconds)."""
    start = time.perf_counter()
    model.generate(prompt, 1, tokens_per_submit=k)
    ttft = time.perf_counter() - start
    start = time.perf_counter()
    model.generate(prompt, 1 + n_decode, tokens_per_submit=k)
    return ttft, time.perf_counter() - start - ttft


def dispatches_per_token(model: ReferenceModel, prompt: list[int]) -> int:
    """Counted by the recorder on one decode step, apart from the timed runs: the
    wrappers are removed again so that they add nothing to the timings."""
    model.reset()
    model.forward(prompt)
    try:
        with count_dispatches() as counts:
            model.decode_step()
    finally:
        recorder.uninstall()
    return counts.dispatches


def print_kernel_times(model: ReferenceModel, prompt: list[int], roofline: float) -> dict:
    """GPU time per dispatch of each kernel label, by timestamps: alone (its dispatches
    repeated) and in the decode loop (where each waits for the one before and finds the
    weights wherever the loop left them), with GB/s and % of the copy roofline for each; and
    for a weight-streaming kernel, the time of a bare read of its weight bytes
    (``bare_read_us``) and how near the kernel alone comes to it."""
    model.reset()
    model.forward(prompt)
    alone = model.time_kernels(n_tokens=1)
    model.reset()
    model.forward(prompt)
    in_loop = model.time_kernels_in_loop() or {}
    counts = model.expected_dispatches()
    weight_bytes = model.weight_bytes()
    streaming = {k.name for k in model.kernels if any(op.kind == "matmul" for op in k.ops)}
    bare_by_size = {n: bare_read_us(model.device, n) for n in sorted({weight_bytes[label] for label in streaming})}
    bare = {label: bare_by_size[weight_bytes[label]] for label in streaming}
    print(f"#   {model.level} decode step, GPU µs per dispatch by kernel: alone (its dispatches repeated in one pass) "
          f"and in the loop (20 decode forwards, a timestamp after each dispatch{'' if in_loop else ': not available here'});")
    print(f"#   GB/s = weight bytes per dispatch / time, % of the measured copy bandwidth {roofline / 1e9:.0f} GB/s; "
          f"bare = µs of a dispatch that only reads those bytes, % bare = bare / alone")
    print(f"#     {'kernel':<30} {'n':>4} {'alone':>8} {'GB/s':>6} {'%':>4} {'bare':>6} {'% bare':>6} {'in loop':>8} "
          f"{'GB/s':>6} {'%':>4} {'µs/token':>9}")

    def rate(label: str, us: float | None) -> float | None:
        return weight_bytes[label] / (us * 1e-6) if label in streaming and us else None

    def cells(r: float | None) -> str:
        return f"{r / 1e9:6.0f} {100 * r / roofline:4.0f}" if r else f"{'':6} {'':4}"

    kernels = []
    def row_time(label: str) -> float:  # what a label costs a token: in the loop where measured
        return counts[label] * in_loop.get(label, alone[label])

    for label in sorted(alone, key=row_time, reverse=True):
        us, looped = alone[label], in_loop.get(label)
        rate_alone, rate_looped = rate(label, us), rate(label, looped)
        bare_us = bare.get(label)
        kernels.append({"kernel": label, "dispatches": counts[label], "us": us, "us_in_loop": looped,
                        "weight_bytes": weight_bytes[label], "bare_read_us": bare_us,
                        "of_bare_read": bare_us and bare_us / us,
                        "gb_per_s": rate_alone and rate_alone / 1e9,
                        "of_copy_bandwidth": rate_alone and rate_alone / roofline,
                        "gb_per_s_in_loop": rate_looped and rate_looped / 1e9,
                        "of_copy_bandwidth_in_loop": rate_looped and rate_looped / roofline})
        looped_cell = f"{looped:8.1f}" if looped else f"{'':8}"
        bare_cells = f"{bare_us:6.1f} {100 * bare_us / us:6.0f}" if bare_us else f"{'':6} {'':6}"
        print(f"#     {label:<30} {counts[label]:>4} {us:8.1f} {cells(rate_alone)} {bare_cells} {looped_cell} "
              f"{cells(rate_looped)} {row_time(label):9.1f}")
    print(f"#     {'total':<30} {sum(counts.values()):>4} {sum(counts[k] * v for k, v in alone.items()):8.1f} "
          f"{'':25} {sum(counts[k] * v for k, v in in_loop.items()) if in_loop else 0:8.1f}")
    model.reset()
    model.forward(prompt)
    loop = model.time_decode_loop(n=min(50, model.max_seq_len - model.position))
    print(f"#   GPU-resident decode loop (single pass), per token: host encoding {loop['encode_us']:.0f} us, "
          f"finish + submit {loop['finish_submit_us']:.0f} us, then waiting for the GPU {loop['gpu_wait_us']:.0f} us")
    return {"kernels": kernels, "decode_loop": loop}


def torch_peer(config, weights, dtype: str, prompt: list[int], n_decode: int, runs: int, warmup: int,
               compile_too: bool) -> list[dict]:
    """Rows for transformers' Qwen2ForCausalLM on PyTorch CUDA with the same weights, or none
    (saying why) when torch, transformers or a CUDA device is missing."""
    try:
        import torch
        import transformers
    except ImportError as error:
        print(f"# peer torch: not measured ({error})")
        return []
    if not torch.cuda.is_available():
        print("# peer torch: not measured (torch finds no CUDA device)")
        return []
    torch_dtype = {"f32": torch.float32, "f16": torch.float16}[dtype]
    hf = {k: v for k, v in hf_config(config).items() if k not in ("model_type", "architectures")}
    model_class = transformers.Qwen2ForCausalLM if config.qkv_bias else transformers.LlamaForCausalLM
    config_class = transformers.Qwen2Config if config.qkv_bias else transformers.LlamaConfig
    with torch.device("cuda"):
        model = model_class(config_class(**hf)).to(torch_dtype).eval()
    state = {name: torch.from_numpy(array) for name, array in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"peer torch: weights do not fit transformers' model: {unexpected or missing}")
    model.tie_weights()
    name = f"{torch.cuda.get_device_name()} (torch {torch.__version__}, transformers {transformers.__version__})"
    print(f"# peer: {name}")

    def decode(step_model) -> tuple[float, float, list[int]]:
        with torch.no_grad():
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = step_model(torch.tensor([prompt], device="cuda"), use_cache=True)
            tokens = [int(out.logits[0, -1].argmax())]
            ttft = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(n_decode):
                out = step_model(torch.tensor([[tokens[-1]]], device="cuda"), past_key_values=out.past_key_values,
                                 use_cache=True)
                tokens.append(int(out.logits[0, -1].argmax()))  # the token to the host, as in the host loop
            return ttft, time.perf_counter() - start, tokens

    def kernels_per_step(step_model) -> int | None:
        try:
            from torch.profiler import ProfilerActivity, profile
            with torch.no_grad():
                out = step_model(torch.tensor([prompt], device="cuda"), use_cache=True)
                with profile(activities=[ProfilerActivity.CUDA]) as profiler:
                    step_model(torch.tensor([[1]], device="cuda"), past_key_values=out.past_key_values, use_cache=True)
                    torch.cuda.synchronize()
            return sum(1 for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        except Exception as error:  # the profiler is optional: say so, keep the timing rows
            print(f"# peer torch: CUDA kernels not counted ({type(error).__name__}: {error})")
            return None

    variants = [("torch eager", model)]
    if compile_too:
        variants.append(("torch compile", torch.compile(model, dynamic=True)))
    rows = []
    for label, step_model in variants:
        try:
            results = [decode(step_model) for _ in range(warmup + runs)][warmup:]
        except Exception as error:
            print(f"# peer {label}: failed ({type(error).__name__}: {str(error).splitlines()[0][:200]})")
            continue
        tokens_per_s = summary([n_decode / seconds for _, seconds, _ in results])
        ttft_ms = summary([1000 * ttft for ttft, _, _ in results])
        rows.append({"level": label, "encoding": "cuda", "loop": "host", "tokens_per_s": tokens_per_s[0],
                     "tokens_per_s_std": tokens_per_s[1], "ttft_ms": ttft_ms[0], "ttft_ms_std": ttft_ms[1],
                     "dispatches_per_token": kernels_per_step(step_model), "tokens": results[0][2], "peer": name})
    del model
    torch.cuda.empty_cache()
    return rows


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def print_row(row: dict) -> None:
    dispatches = row["dispatches_per_token"]
    print(f"{row['level']:<13} {row['encoding']:<20} {row['loop']:<7} "
          f"{row['tokens_per_s']:>9.1f} ± {row['tokens_per_s_std']:<5.1f}"
          f"{row['ttft_ms']:>9.2f} ± {row['ttft_ms_std']:<5.2f}"
          f"{'' if dispatches is None else dispatches:>16}", flush=True)


def measured_row(level: str, encoding: str, loop: str, results, dispatches) -> dict:
    """A row from [(TTFT seconds, decode seconds)] of the timed repetitions."""
    return {"level": level, "encoding": encoding, "loop": loop, **_rates(results), "dispatches_per_token": dispatches}


def _rates(results) -> dict:
    n_decode, results = results
    tokens_per_s = summary([n_decode / decode for _, decode in results])
    ttft_ms = summary([1000 * ttft for ttft, _ in results])
    return {"tokens_per_s": tokens_per_s[0], "tokens_per_s_std": tokens_per_s[1], "ttft_ms": ttft_ms[0],
            "ttft_ms_std": ttft_ms[1]}


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (Linux's ru_maxrss is in KiB, macOS's in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else 1024 * peak


def write_checkpoint(config, folder: Path, seed: int) -> None:
    """``config``'s random weights (``random_weights``' scales) as one bfloat16 ``model.safetensors``
    and a config.json, a tensor at a time (never the whole model in memory)."""
    folder.mkdir(parents=True, exist_ok=True)
    shapes = weight_names(config)
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape in shapes.items():
            if name.endswith("norm.weight"):
                array = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
            elif name.endswith(".bias"):
                array = 0.1 * rng.standard_normal(shape, dtype=np.float32)
            else:
                array = rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(shape[1]))
            f.write((array.view(np.uint32) >> 16).astype("<u2").tobytes())
            del array
    (folder / "config.json").write_text(json.dumps({**hf_config(config), "torch_dtype": "bfloat16"}, indent=2))
    print(f"# wrote {folder}: {config.name}, {config.n_params / 1e6:.1f}M parameters, "
          f"{(folder / 'model.safetensors').stat().st_size / 1e6:.0f} MB")


def run_checkpoint(args) -> None:
    """A checkpoint from a cold start: load, build, first token, then the text and tokens/s."""
    folder = Path(args.checkpoint).expanduser()
    on_disk = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    before = peak_rss_bytes()

    def memory(what: str) -> None:
        peak = peak_rss_bytes()
        print(f"# peak resident memory {what}: {peak / 1e6:.0f} MB = {peak / on_disk:.2f}x the checkpoint's "
              f"{on_disk / 1e6:.0f} MB on disk ({(peak - before) / 1e6:.0f} MB = {(peak - before) / on_disk:.2f}x "
              f"over the {before / 1e6:.0f} MB before loading)")

    if args.load_only:
        start = time.perf_counter()
        config, tensors = load_pretrained(folder)
        weights = load_weights(tensors, config, where=str(folder))
        for name in weights:
            np.asarray(weights[name], dtype=np.float32)  # what a consumer does with each, one at a time
        print(f"# {config.name}: {len(weights)} tensors loaded and converted to float32 in "
              f"{time.perf_counter() - start:.2f} s")
        memory("after loading")
        return
    adapter, device = request_device(args.dtype, args.impl)
    print(f"# adapter: {adapter.info['device']} ({adapter.info['adapter_type']}, {adapter.info['backend_type']})")
    start = time.perf_counter()
    model = ReferenceModel.from_pretrained(device, folder, level=args.level, dtype=args.dtype,
                                           max_seq_len=args.tokens + max(args.prompt_len, 512) + 1)
    built = time.perf_counter()
    config = model.config
    if args.prompt is not None and model.tokenizer is None:
        sys.exit(f"--prompt needs {folder}/tokenizer.json and the 'hf' extra (pip install 'pytest-dispatch[hf]')")
    prompt = (model.tokenizer.encode(args.prompt).ids if args.prompt is not None else
              [int(t) for t in np.random.default_rng(args.seed).integers(0, config.vocab_size, args.prompt_len)])
    first = model.forward(prompt)
    now = time.perf_counter()
    print(f"# {config.name}: {config.n_layers} layers, {config.n_params / 1e6:.1f}M parameters, {args.dtype}, "
          f"{args.level}; rope_theta {config.rope_theta:g}, scaling {config.rope_scaling}")
    print(f"# cold start: imports and device {start - STARTED:.2f} s, from_pretrained (load, upload, pipelines) "
          f"{built - start:.2f} s, first token of a {len(prompt)}-token prompt {1000 * (now - built):.0f} ms; "
          f"time to first token {now - STARTED:.2f} s")
    memory("after the first token")
    model.generate(prompt, 2)  # warm: the decode grid's first use
    start = time.perf_counter()
    tokens = model.generate(prompt, 1 + args.tokens, tokens_per_submit=max(args.tokens_per_submit or [1]))
    seconds = time.perf_counter() - start
    print(f"# greedy generate of {1 + args.tokens} tokens: {(1 + args.tokens) / seconds:.1f} tokens/s "
          f"(prefill included; tokens_per_submit {max(args.tokens_per_submit or [1])})")
    if model.tokenizer is not None and args.prompt is not None:
        print(f"{args.prompt!r} -> {model.generate_text(args.prompt, max_new_tokens=1 + args.tokens)!r}")
    else:
        print(f"# tokens: {tokens}")


def main(argv=None) -> None:
    args = parse_args(argv)
    config = get_config(args.config, widths=args.widths)
    if args.write_checkpoint:
        write_checkpoint(config, Path(args.write_checkpoint).expanduser(), args.seed)
        return
    if args.checkpoint:
        run_checkpoint(args)
        return
    if args.peer == "torch":
        try:
            import torch  # noqa: F401  (before wgpu creates an adapter: the other order crashes on CUDA hosts)
        except ImportError:
            pass
    adapter, device = request_device(args.dtype, args.impl)
    prompt = [int(t) for t in np.random.default_rng(args.seed).integers(0, config.vocab_size, args.prompt_len)]
    max_seq_len = args.prompt_len + args.tokens + 1
    print(f"# {config.name}, {config.n_layers} layers, {config.n_params / 1e6:.1f}M parameters, {args.dtype}; "
          f"prompt {args.prompt_len} tokens, decode {args.tokens}; {args.runs} runs after {args.warmup} warm-up")
    print(f"# adapter: {adapter.info['device']} ({adapter.info['adapter_type']}, {adapter.info['backend_type']}, "
          f"{adapter.info['description']}); {args.impl} (wgpu {wgpu.__version__})")
    weights = random_weights(config, args.seed)
    # The roofline is the best of copies timed at the start and before each level's kernel
    # times: one measurement alone has read half the H200's bandwidth (2,080 GB/s, 12-01 22:41).
    bandwidths = [copy_bandwidth(device)] if args.kernel_times else []
    if bandwidths:
        print(f"# copy bandwidth (read + write): {bandwidths[0] / 1e9:.0f} GB/s")

    rows, kernel_times, reference_tokens = [], {}, None
    header = (f"{'level':<13} {'encoding':<20} {'loop':<7} {'tokens/s':>16} {'TTFT ms':>16} "
              f"{'dispatches/token':>16}")
    print(header)
    print("-" * len(header))
    for level in args.levels:
        model = ReferenceModel(device, config, level=level, dtype=args.dtype, weights=weights,
                               max_seq_len=max_seq_len)
        for encoding in args.encodings:
            model.encoding = encoding
            dispatches = dispatches_per_token(model, prompt)
            results = [measure(model, prompt, args.tokens) for _ in range(args.warmup + args.runs)][args.warmup:]
            rows.append(measured_row(level, encoding, "host", (args.tokens, results), dispatches))
            print_row(rows[-1])
            for k in args.tokens_per_submit:
                results = [measure_resident(model, prompt, args.tokens, k)
                           for _ in range(args.warmup + args.runs)][args.warmup:]
                rows.append(measured_row(level, encoding, f"gpu x{k}", (args.tokens, results), dispatches))
                print_row(rows[-1])
        reference_tokens = model.generate(prompt, 1 + args.tokens)
        if args.kernel_times:
            bandwidths.append(copy_bandwidth(device))
            print(f"# copy bandwidth (read + write) again: {bandwidths[-1] / 1e9:.0f} GB/s; the roofline is "
                  f"the best so far, {max(bandwidths) / 1e9:.0f} GB/s")
            kernel_times[level] = print_kernel_times(model, prompt, max(bandwidths))
        del model

    if args.peer == "torch":
        peer_rows = torch_peer(config, weights, args.dtype, prompt, args.tokens, args.runs, args.warmup,
                               args.peer_compile)
        for row in peer_rows:
            print_row(row)
            same = row.pop("tokens") == reference_tokens
            row["tokens_match_reference"] = same
            print(f"#   {row['level']}: greedy tokens {'equal' if same else 'DIFFER from'} the WGSL model's "
                  f"({args.levels[-1]})")
        rows += peer_rows

    webgpu = [r for r in rows if r["encoding"] != "cuda"]
    baseline = next((r for r in webgpu if (r["level"], r["encoding"], r["loop"]) == ("eager", "submit-per-dispatch",
                                                                                       "host")), None)
    best = max(webgpu, key=lambda r: r["tokens_per_s"]) if webgpu else None
    if best and baseline:
        print(f"# fastest: {best['level']} {best['encoding']} {best['loop']}, "
              f"{best['tokens_per_s'] / baseline['tokens_per_s']:.2f}x eager submit-per-dispatch")
    torch_eager = next((r for r in rows if r["level"] == "torch eager"), None)
    if best and torch_eager:
        print(f"# fastest: {best['tokens_per_s'] / torch_eager['tokens_per_s']:.2f}x torch eager (same run)")
    if args.plot:
        from pytest_dispatch.presentation import plot

        title = f"{config.name} {args.dtype}, {adapter.info['device']} ({adapter.info['backend_type']})"
        plot.plot_levels(args.plot, [{**r, "encoding": f"{r['encoding']} {r['loop']}",
                                      "dispatches_per_token": r["dispatches_per_token"] or 0} for r in rows], title)
    if args.json:
        setup = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "command": " ".join(sys.argv), "config": config.name, "n_layers": config.n_layers,
                 "dtype": args.dtype, "prompt_len": args.prompt_len, "tokens": args.tokens, "runs": args.runs,
                 "warmup": args.warmup, "adapter": dict(adapter.info), "impl": args.impl, "wgpu": wgpu.__version__,
                 "copy_bandwidth_bytes_per_s": max(bandwidths, default=None),
                 "copy_bandwidths_measured": bandwidths}
        with open(args.json, "w") as f:
            json.dump({"setup": setup, "rows": rows, "kernel_times": kernel_times}, f, indent=2)


if __name__ == "__main__":
    main()
