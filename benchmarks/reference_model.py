"""Tokens/s, TTFT and dispatches/token of the WGSL reference transformer, per level x encoding.

The paper's end-to-end method (greedy decode, batch 1, a 5-token prompt): TTFT is one
prefill forward of the prompt up to its first token read back; tokens/s is the decode of
``--tokens`` more tokens, one forward each. The 4-byte readback of each token is the sync.
Each row is measured in one run per repetition: warm-up repetitions are discarded, the rest
give mean and standard deviation. Dispatches/token are the dispatches the model encoded
in one decode step, counted by the recorder outside the timed runs.

    python benchmarks/reference_model.py --config tiny
    python benchmarks/reference_model.py --config qwen2.5-0.5b --runs 10 --json results.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

import numpy as np
import wgpu

from pytest_dispatch import count_dispatches, gpu, recorder
from pytest_dispatch.reference import CONFIGS, DTYPES, ENCODINGS, LEVELS, ReferenceModel, get_config, random_weights


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
                        help="also print GPU time per kernel of a decode step (repeated dispatches)")
    args = parser.parse_args(argv)
    args.levels = _choices(parser, "--levels", args.levels, LEVELS)
    args.encodings = _choices(parser, "--encodings", args.encodings, ENCODINGS)
    return args


def _choices(parser, flag, value, allowed):
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        parser.error(f"{flag}: unknown {unknown}; choose from {','.join(allowed)}")
    return chosen


def request_device(dtype: str):
    """The plugin's adapter choice and device (maximum buffer sizes, shader-f16 when present)."""
    try:
        adapter = gpu.select_adapter(gpu.AdapterRequest())
    except gpu.NoAdapterError as error:
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


def print_kernel_times(model: ReferenceModel, prompt: list[int]) -> None:
    model.reset()
    model.forward(prompt)
    times = model.time_kernels(n_tokens=1)
    counts = model.expected_dispatches()
    print(f"#   {model.level} decode step, GPU time by kernel, encoding excluded (repeated dispatches in one pass):")
    for label, us in sorted(times.items(), key=lambda item: -item[1] * counts[item[0]]):
        print(f"#     {label:<30} {counts[label]:>4} x {us:8.1f} us = {counts[label] * us:8.1f} us")
    print(f"#     {'total':<30} {sum(counts.values()):>4}            {sum(counts[k] * v for k, v in times.items()):8.1f} us")


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main(argv=None) -> None:
    args = parse_args(argv)
    config = get_config(args.config, widths=args.widths)
    adapter, device = request_device(args.dtype)
    prompt = [int(t) for t in np.random.default_rng(args.seed).integers(0, config.vocab_size, args.prompt_len)]
    max_seq_len = args.prompt_len + args.tokens + 1
    print(f"# {config.name}, {config.n_layers} layers, {config.n_params / 1e6:.1f}M parameters, {args.dtype}; "
          f"prompt {args.prompt_len} tokens, decode {args.tokens}; {args.runs} runs after {args.warmup} warm-up")
    print(f"# adapter: {adapter.info['device']} ({adapter.info['adapter_type']}, {adapter.info['backend_type']}, "
          f"{adapter.info['description']}); wgpu {wgpu.__version__}")
    weights = random_weights(config, args.seed)

    rows = []
    header = f"{'level':<7} {'encoding':<20} {'tokens/s':>16} {'TTFT ms':>16} {'dispatches/token':>16}"
    print(header)
    print("-" * len(header))
    for level in args.levels:
        model = ReferenceModel(device, config, level=level, dtype=args.dtype, weights=weights,
                               max_seq_len=max_seq_len)
        for encoding in args.encodings:
            model.encoding = encoding
            results = [measure(model, prompt, args.tokens) for _ in range(args.warmup + args.runs)][args.warmup:]
            tokens_per_s = summary([args.tokens / decode for _, decode in results])
            ttft_ms = summary([1000 * ttft for ttft, _ in results])
            dispatches = dispatches_per_token(model, prompt)
            rows.append({"level": level, "encoding": encoding, "tokens_per_s": tokens_per_s[0],
                         "tokens_per_s_std": tokens_per_s[1], "ttft_ms": ttft_ms[0], "ttft_ms_std": ttft_ms[1],
                         "dispatches_per_token": dispatches})
            print(f"{level:<7} {encoding:<20} {tokens_per_s[0]:>9.1f} ± {tokens_per_s[1]:<5.1f}"
                  f"{ttft_ms[0]:>9.2f} ± {ttft_ms[1]:<5.2f}{dispatches:>16.0f}", flush=True)
        if args.kernel_times:
            print_kernel_times(model, prompt)
        del model

    baseline = next((r for r in rows if (r["level"], r["encoding"]) == ("eager", "submit-per-dispatch")), None)
    if baseline:
        best = max(rows, key=lambda r: r["tokens_per_s"])
        print(f"# fastest: {best['level']} {best['encoding']}, "
              f"{best['tokens_per_s'] / baseline['tokens_per_s']:.2f}x eager submit-per-dispatch")
    if args.plot:
        from pytest_dispatch import plot

        title = f"{config.name} {args.dtype}, {adapter.info['device']} ({adapter.info['backend_type']})"
        plot.plot_levels(args.plot, rows, title)
    if args.json:
        setup = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "command": " ".join(sys.argv), "config": config.name, "n_layers": config.n_layers,
                 "dtype": args.dtype, "prompt_len": args.prompt_len, "tokens": args.tokens, "runs": args.runs,
                 "warmup": args.warmup, "adapter": dict(adapter.info), "wgpu": wgpu.__version__}
        with open(args.json, "w") as f:
            json.dump({"setup": setup, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
