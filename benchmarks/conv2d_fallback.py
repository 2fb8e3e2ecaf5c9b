"""Native Conv2d vs gpuwatch's im2col fallback on a YOLOv8n-shaped training step (same process, same run).

For each batch size and precision the script builds the same model (same seed) once per variant and
trains them side by side on 640x640 random images: every round runs one SGD step of each variant in
turn (the order alternating), each step synchronised, so that the host-speed drift of a shared VM
(+-20% between calls, and within one) hits every variant alike. It reports the median step time
over ``--steps`` rounds after ``--warmup`` rounds, then, each variant alone, the peak allocated device memory
of a few steps, and the ratios to the first variant. Before timing it checks on the device that the
fallback dispatches no native convolution and matches the native gradients in float32.

Variants: ``native``; ``fallback`` (autotuned per signature, what ``patch_conv2d`` runs),
``fallback:fixed`` (autotuning off: the fixed strategies), ``fallback:WGRAD/DGRAD`` (autotuning off,
other strategies), ``fallback:triton`` (the Triton kernels among the candidates), ``fallback:python``
(the host code in Python rather than compiled, conv2d/host.py) and
``fallback+nocudnn`` (the fallback in a script that turned cuDNN off, as ``auto`` mode then chooses:
batch norm runs PyTorch's own kernels too, as in ``nocudnn``); the MIOpen-free alternatives a user has
without gpuwatch: ``nocudnn`` (``torch.backends.cudnn.enabled = False`` for the whole step: PyTorch's
slow_conv2d) and ``naive`` (F.unfold + matmul under plain autograd). Each runs its backward where it
would run by default: native, nocudnn and naive on the autograd engine's device thread (PyTorch's
default), the fallback on the calling thread (what ``patch_conv2d`` and ``gpuwatch train`` set). A suffix
``@caller`` or ``@engine`` overrides that, so ``native@caller`` is native under the fallback's setting.

``--converge STEPS`` also trains native and the fallback STEPS steps each from the same seed at every
point and prints how far apart their final losses are (issue 52: within 1 % after 150 steps).

Peak memory is measured twice for the fallback: with its choices made (as the timed steps ran), and
over its first steps in a fresh process state, autotuning included (``first_peak_bytes``).

    python benchmarks/conv2d_fallback.py --batches 4 16 --precisions fp32 amp \
        --variants native native@caller fallback

Needs a GPU for meaningful numbers; ``--device cpu --image-size 64`` is a smoke test.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heartbeat_hook_cost import hook_cost_s  # noqa: E402
from yolov8n_model import build_model, make_step, train_steps  # noqa: E402

from gpuwatch.train.conv2d.plan import DEFAULT_TUNING, Conv2dTuning, plan_for  # noqa: E402
from gpuwatch.train.patch import patch_conv2d  # noqa: E402

PRECISIONS = {"fp32": None, "amp": torch.float16, "amp-bf16": torch.bfloat16}


_VENDOR_BACKENDS = {"Cudnn", "CudnnTranspose", "Miopen", "MiopenDepthwise", "MiopenTranspose"}
_GENERIC_CONVS = {"aten.convolution.default", "aten._convolution.default"}


class _ConvCounter(TorchDispatchMode):
    """Counts convolutions that reach cuDNN/MIOpen (``convs``) and PyTorch's own ones (``own_convs``).

    ``aten.convolution`` and ``convolution_backward`` pick their kernel when they run, from the
    global cuDNN switch: PyTorch's own selection (``_select_conv_backend``) is asked with the flags
    in force at the call."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = 0
        self.own_convs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if "conv" in name:
            if "cudnn" in name or "miopen" in name:
                vendor = True
            elif name in _GENERIC_CONVS or name == "aten.convolution_backward.default":
                x, w = (args[1], args[2]) if "backward" in name else (args[0], args[1])
                stride, padding, dilation, transposed, output_padding, groups = (
                    args[4:10] if "backward" in name else args[3:9]
                )
                backend = torch._C._select_conv_backend(
                    x, w, None, list(stride), list(padding), list(dilation), transposed, list(output_padding), groups
                )
                vendor = backend.name in _VENDOR_BACKENDS
            else:  # _slow_conv2d_*, slow_conv_dilated2d, _conv_depthwise2d: PyTorch's own kernels
                vendor = False
            self.convs += vendor
            self.own_convs += not vendor
        return func(*args, **(kwargs or {}))


def backward_on_caller(variant: str) -> bool:
    """Where ``variant``'s backward runs: the fallback's default is the calling thread."""
    thread = variant.partition("@")[2]
    if thread not in ("", "caller", "engine"):
        raise SystemExit(f"unknown backward thread {thread!r} in variant {variant!r} (caller or engine)")
    return thread == "caller" if thread else variant.startswith("fallback")


@contextlib.contextmanager
def variant_settings(variant: str):
    """The variant's backward thread; cuDNN off for ``nocudnn``."""
    cudnn = torch.backends.cudnn.enabled
    kind = variant.partition("@")[0]
    torch.backends.cudnn.enabled = cudnn and not (kind == "nocudnn" or kind.endswith("+nocudnn"))
    try:
        with torch.autograd.set_multithreading_enabled(not backward_on_caller(variant)):
            yield
    finally:
        torch.backends.cudnn.enabled = cudnn


def tuning_of(variant: str) -> Conv2dTuning:
    """``fallback``: the default (autotuned); ``fallback:fixed`` or ``fallback:WGRAD/DGRAD``: autotuning
    off, with those gradient strategies; ``fallback:triton``: autotuned with the Triton kernels too;
    ``fallback:python``: autotuned, the host code in Python."""
    spec = variant.partition("@")[0].partition("+")[0].partition(":")[2]
    if spec == "triton":
        return Conv2dTuning(triton=True)
    if spec == "python":
        return Conv2dTuning(host="python")
    if not spec:
        return DEFAULT_TUNING
    wgrad, _, dgrad = ("" if spec == "fixed" else spec).partition("/")
    return Conv2dTuning(wgrad=wgrad or DEFAULT_TUNING.wgrad, dgrad=dgrad or DEFAULT_TUNING.dgrad, autotune=False)


@contextlib.contextmanager
def naive_unfold(model: torch.nn.Module):
    """The reference point of the issue: F.unfold + matmul under plain autograd (columns saved)."""

    def forward(conv: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = conv.kernel_size, conv.stride, conv.padding, conv.dilation
        out_h, out_w = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        cols = torch.nn.functional.unfold(x, conv.kernel_size, conv.dilation, conv.padding, conv.stride)
        out = (conv.weight.view(conv.out_channels, -1) @ cols).view(n, -1, out_h, out_w)
        return out if conv.bias is None else out + conv.bias.view(1, -1, 1, 1)

    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    for conv in convs:
        conv.forward = functools.partial(forward, conv)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for conv in convs:
            del conv.forward


def check_on_device(device: torch.device, variant: str) -> dict[str, float]:
    """No native conv in the fallback, and float32 forward/grads equal to native (relative error)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        results = []
        for fallback in (False, True):
            model = build_model().to(device)
            torch.manual_seed(0)
            x = torch.randn(2, 3, 256, 256, device=device)
            with patch_conv2d(model, "on" if fallback else "off", tuning=tuning_of(variant)), _ConvCounter() as counter:
                loss = sum(o.square().mean() for o in model(x))
                loss.backward()
            results.append((loss.detach(), [p.grad.detach().clone() for p in model.parameters()],
                            counter.convs, counter.own_convs))
        (ref_loss, ref_grads, _, _), (loss, grads, convs, own) = results
        grad_err = max(float((g - r).norm() / r.norm().clamp_min(1e-30)) for g, r in zip(grads, ref_grads, strict=True))
        return {
            "native_convs_in_fallback": convs,
            "own_convs_in_fallback": own,
            "loss_rel_err": float((loss - ref_loss).abs() / ref_loss.abs()),
            "max_grad_rel_err": grad_err,
        }
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _patched(variant: str, model: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
    kind = variant.partition("@")[0]
    if kind == "naive":
        return naive_unfold(model)
    # The backward thread is the variant's (variant_settings), not the patch's.
    native = kind in ("native", "nocudnn")
    return patch_conv2d(model, "off" if native else "on", backward_on_caller=False, tuning=tuning_of(variant))


def interleaved_seconds(
    variants: list[str], batch: int, precision: str, args: argparse.Namespace
) -> dict[str, list[float]]:
    """Per variant, the synchronised time of each timed step, the variants' steps taken in turn."""
    device = torch.device(args.device)
    times: dict[str, list[float]] = {v: [] for v in variants}
    first: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        steps = {}
        for variant in variants:
            model = build_model()
            stack.enter_context(_patched(variant, model))
            steps[variant] = make_step(
                model, batch_size=batch, image_size=args.image_size, device=device, amp_dtype=PRECISIONS[precision]
            )
        for index in range(args.warmup + args.steps):
            for variant in variants if index % 2 == 0 else variants[::-1]:
                with variant_settings(variant):
                    _sync(device)
                    start = time.perf_counter()
                    steps[variant]()
                    _sync(device)
                if index >= args.warmup:
                    times[variant].append(time.perf_counter() - start)
                elif index == 0:
                    first[variant] = time.perf_counter() - start
    times.update({f"{variant}/first step": [seconds] for variant, seconds in first.items()})
    return times


def peak_bytes(variant: str, batch: int, precision: str, args: argparse.Namespace, fresh: bool = False) -> int:
    """Peak allocated device memory of a few steps of ``variant`` alone (after the timing pass, so
    cuDNN's autotuning workspaces are behind us). ``fresh``: the fallback's plans and choices are
    forgotten first, so its autotuning runs within the measured steps."""
    device = torch.device(args.device)
    if device.type != "cuda":
        return 0
    if fresh:
        plan_for.cache_clear()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    model = build_model()
    with _patched(variant, model), variant_settings(variant):
        train_steps(model, steps=3, batch_size=batch, image_size=args.image_size, device=device,
                    amp_dtype=PRECISIONS[precision], warmup=2)
    del model
    return torch.cuda.max_memory_allocated(device) - base


def converge(batch: int, precision: str, args: argparse.Namespace) -> dict[str, float]:
    """Native and the fallback each trained ``--converge`` steps from the same seed on the same batch:
    the final losses (mean of the last 10 steps) and their relative difference."""
    device = torch.device(args.device)
    finals = {}
    for variant in ("native", "fallback"):
        torch.manual_seed(0)
        model = build_model()
        losses = []
        with _patched(variant, model), variant_settings(variant):
            step = make_step(model, batch_size=batch, image_size=args.image_size, device=device,
                             amp_dtype=PRECISIONS[precision])
            for _ in range(args.converge):
                losses.append(float(step()))
        finals[variant] = statistics.fmean(losses[-10:])
        finals[f"{variant} first"] = losses[0]
    finals["rel_diff"] = abs(finals["fallback"] - finals["native"]) / abs(finals["native"])
    return finals


def block_ratios(ref: list[float], other: list[float], blocks: int) -> list[float]:
    """Ratio of medians in each of ``blocks`` consecutive slices of the rounds: the host's speed
    drifts in phases, and a slow phase makes the (host-heavier) fallback look worse."""
    size = max(1, len(ref) // blocks)
    slices = [slice(start, start + size) for start in range(0, len(ref) - size + 1, size)]
    return [statistics.median(other[part]) / statistics.median(ref[part]) for part in slices]


def _pairs(variants: list[str]) -> list[tuple[str, str]]:
    """Every variant against the first, and a non-native one also against the native variant
    whose backward runs on the same thread (the like-for-like comparison)."""
    pairs = [(variants[0], other) for other in variants[1:]]
    natives = [v for v in variants if v.startswith("native")]
    for other in variants:
        same = [n for n in natives if backward_on_caller(n) == backward_on_caller(other)]
        if not other.startswith("native") and same and same[0] != variants[0]:
            pairs.append((same[0], other))
    return pairs


def _summary_table(variants: list[str], rows: list[tuple[int, str, dict]]) -> None:
    """Per point: every variant's median step, the fallback against native and against the best
    MIOpen-free alternative a user has without gpuwatch (nocudnn, naive), and the peak memory ratios."""
    alternatives = [v for v in variants if v.partition("@")[0] in ("nocudnn", "naive")]
    if "native" not in variants or "fallback" not in variants:
        return
    if "fallback+nocudnn" in variants and "nocudnn" in variants:
        print("\nwith cuDNN off for the whole step (batch norm too): " + ", ".join(
            f"batch {batch} {precision} fallback+nocudnn {s['fallback+nocudnn']['ms']:.1f} ms = "
            f"{s['fallback+nocudnn']['ms'] / s['nocudnn']['ms']:.2f}x nocudnn" for batch, precision, s in rows))
    print("\n| batch | precision | " + " | ".join(f"{v} ms" for v in variants)
          + " | fallback vs native | vs best alternative | peak vs native | first-steps peak vs native |")
    print("|---" * (len(variants) + 6) + "|")
    for batch, precision, summary in rows:
        native, fallback = summary["native"], summary["fallback"]
        best = min((summary[v]["ms"] for v in alternatives), default=float("nan"))
        print(f"| {batch} | {precision} | " + " | ".join(f"{summary[v]['ms']:.1f}" for v in variants)
              + f" | {fallback['ms'] / native['ms']:.2f}x | {fallback['ms'] / best:.2f}x"
              f" | {fallback['peak_bytes'] / max(1, native['peak_bytes']):.3f}x"
              f" | {fallback.get('first_peak_bytes', 0) / max(1, native['peak_bytes']):.3f}x |")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=["fp32", "amp"])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["native", "native@caller", "fallback"],
        help="native, nocudnn, naive, fallback[:fixed|:triton|:WGRAD[/DGRAD]][+nocudnn], each with an optional "
        "@caller or @engine",
    )
    parser.add_argument("--image-size", type=int, default=640)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=4, help="report ratios per block of consecutive rounds too")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tf32", choices=["on", "off"], default="on", help="TF32 for cuDNN convs and matmuls alike")
    parser.add_argument("--cudnn-benchmark", choices=["on", "off"], default="on")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--converge", type=int, default=0, metavar="STEPS",
                        help="also train native and the fallback STEPS steps each from one seed at every point and "
                        "compare their final losses (issue 52: within 1 %% at 150 steps)")
    args = parser.parse_args()

    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    env = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn_benchmark": args.cudnn_benchmark,
        "tf32": args.tf32,
        "defaults": f"{DEFAULT_TUNING.wgrad}/{DEFAULT_TUNING.dgrad}",
        "heartbeat_hooks_us_per_step": round(hook_cost_s() * 1e6, 2),
    }
    for variant in args.variants:
        backward_on_caller(variant)  # reject a bad suffix before any work
    env["check"] = {v: check_on_device(device, v) for v in args.variants if v.startswith("fallback")}
    print(json.dumps(env), flush=True)

    rows, raw = [], []
    for batch in args.batches:
        for precision in args.precisions:
            seconds = interleaved_seconds(args.variants, batch, precision, args)
            summary = {}
            for variant in args.variants:
                summary[variant] = {
                    "ms": statistics.median(seconds[variant]) * 1e3,
                    "first_step_ms": seconds[f"{variant}/first step"][0] * 1e3,
                    "peak_bytes": peak_bytes(variant, batch, precision, args),
                }
                if variant.startswith("fallback"):
                    summary[variant]["first_peak_bytes"] = peak_bytes(variant, batch, precision, args, fresh=True)
                print(f"batch {batch} {precision} {variant}: {summary[variant]['ms']:.2f} ms "
                      f"(first step {summary[variant]['first_step_ms']:.0f} ms), "
                      f"peak {summary[variant]['peak_bytes'] / 2**30:.3f} GiB"
                      + (f", first steps (autotuning) {summary[variant]['first_peak_bytes'] / 2**30:.3f} GiB"
                         if "first_peak_bytes" in summary[variant] else ""), flush=True)
            entry = {"batch": batch, "precision": precision, "summary": summary, "seconds": seconds}
            if args.converge:
                entry["converge"] = converged = converge(batch, precision, args)
                print(f"batch {batch} {precision}: after {args.converge} steps the loss is {converged['native']:.6g} "
                      f"native, {converged['fallback']:.6g} fallback (first {converged['native first']:.6g}): "
                      f"{100 * converged['rel_diff']:.3f} % apart", flush=True)
            raw.append(entry)
            rows.append((batch, precision, summary))

    print()
    print(f"{name}, torch {torch.__version__}, {args.image_size}x{args.image_size}, "
          f"median of {args.steps} interleaved steps, TF32 {args.tf32}, "
          f"cudnn.benchmark {args.cudnn_benchmark}")
    for ref, other in _pairs(args.variants):
        print(f"\n| batch | precision | {ref} ms | {other} ms | time ratio | per-step ratio quartiles | "
              f"{args.blocks} blocks: median ratio (range) | {ref} peak GiB | {other} peak GiB | memory ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for (batch, precision, summary), entry in zip(rows, raw, strict=True):
            a, b = summary[ref], summary[other]
            per_step = [y / x for x, y in zip(entry["seconds"][ref], entry["seconds"][other], strict=True)]
            q1, _, q3 = statistics.quantiles(per_step, n=4) if len(per_step) > 1 else (per_step * 3)
            blocks = block_ratios(entry["seconds"][ref], entry["seconds"][other], args.blocks)
            mem_ratio = b["peak_bytes"] / a["peak_bytes"] if a["peak_bytes"] else float("nan")
            print(f"| {batch} | {precision} | {a['ms']:.1f} | {b['ms']:.1f} | {b['ms'] / a['ms']:.2f}x | "
                  f"{q1:.2f}x-{q3:.2f}x | {statistics.median(blocks):.2f}x ({min(blocks):.2f}x-{max(blocks):.2f}x) | "
                  f"{a['peak_bytes'] / 2**30:.2f} | {b['peak_bytes'] / 2**30:.2f} | {mem_ratio:.2f}x |")
    _summary_table(args.variants, rows)
    if args.converge:
        print(f"\n{args.converge}-step loss, fallback vs native: " + ", ".join(
            f"batch {e['batch']} {e['precision']} {100 * e['converge']['rel_diff']:.3f} %" for e in raw))
    if args.json:
        args.json.write_text(json.dumps({"env": env, "results": raw}, indent=1))


if __name__ == "__main__":
    main()
