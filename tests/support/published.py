"""A fixed PublishedState for the golden /metrics file and promtool: two real GPUs plus example controller state.

The GPUs are read from a real-topology fake tree (navi21 + navi31 captures); fan and trainer states are
examples with fixed values (a fixed clock), as the fan controller and supervisor would publish them; the
limits in force are the default [thermal]'s, as the daemon's tick computes them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpuwatch.config.cooling import FanConfig, ThermalConfig
from gpuwatch.config.sections import HealthConfig
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.limits import limits_in_force
from gpuwatch.model import (
    ClockMode,
    ClockState,
    DaemonInfo,
    FanMode,
    FanState,
    GpuProcess,
    GpuReading,
    GpuResetState,
    JobGpuReceipt,
    JobReceipt,
    PowerMode,
    PowerState,
    PublishedState,
    ReadError,
    TrainerGpuUse,
    TrainerPhase,
    TrainerState,
    UnmanagedState,
)
from gpuwatch.publish.live import rung_of
from gpuwatch.publish.verdict import judge
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.gpu_metrics import CARD_TABLES
from tests.support.pcie import radeon_switch, write_aer
from tests.support.trees import capture

NOW_UNIX = 1_800_000_000.0
GPU_A = "0000:03:00.0"
GPU_B = "0000:0c:00.0"
GPU_GONE = "0000:43:00.0"


def two_gpu_tree(root: Path) -> FakeSysfsTree:
    """The two captures, each behind its on-package PCIe switch, with a gpu_metrics table built from
    its own values (tests/support/gpu_metrics.py) and AER counters. GPU_B sits in a degraded slot
    (8 GT/s x8 where both ends could do 16 GT/s x16, as on a riser) whose root port saw 3 correctable
    errors, and its table says it holds its power limit."""
    tree = FakeSysfsTree(root)
    cards = [
        tree.add_capture(capture(name), card=card, pci_slot=slot, bridge=radeon_switch(tree, port, bus, link))
        for name, card, slot, port, bus, link in (
            ("navi21-rx6900xt-sapphire-nitro", "card0", GPU_A, "0000:00:01.1", 0x01, ("16.0 GT/s", 16)),
            ("navi31-rx7900xtx-sapphire-nitro", "card1", GPU_B, "0000:00:03.1", 0x0a, ("8.0 GT/s", 8)),
        )
    ]
    for placed, name, replays in zip(cards, ("navi21-rx6900xt-sapphire-nitro", "navi31-rx7900xtx-sapphire-nitro"),
                                     (0, 5), strict=True):
        device = tree.root / placed.device_dir
        (device / "gpu_metrics").write_bytes(CARD_TABLES[name])
        (device / "pcie_replay_count").write_text(f"{replays}\n")
        write_aer(device)
    write_aer(tree.root / "devices/pci0000:00/0000:00:03.1", correctable={"RxErr": 2, "BadTLP": 1})
    return tree


def example_state(root: Path) -> PublishedState:
    tree = two_gpu_tree(root)
    clock = iter([99.0, 99.5, 100.0, 100.5])
    sampler = Sampler([AmdgpuSource(Sysfs(tree.root))], wall_clock=lambda: NOW_UNIX, monotonic=lambda: next(clock))
    sampler.sample()  # a tick before, 1 s earlier: energy and time throttled count from there
    snapshot = sampler.sample()
    # A GPU that fell off the bus: identity kept, up=0, no values.
    gone = GpuReading(gpu_id=GPU_GONE, card="card2", backend="amdgpu", name="Navi 31", device_id="1002:744C", up=False,
                      errors=(ReadError("device", "no longer present"),))
    # resnet's tree on GPU A (a DataLoader worker shares the leader's client), a desktop client beside it,
    # and GPU B reset twice, still held by an unsupervised process stuck in D state.
    processes = (
        GpuProcess(pid=4242, gpu_id=GPU_A, command="python3 train.py", user="alice", trainer="resnet", state="S",
                   vram_bytes=12 * 2**20, gtt_bytes=20 * 2**20, engine_busy_ratio=0.0, kfd=True,
                   kfd_vram_bytes=6 * 2**30, kfd_cu_occupancy_ratio=0.75, sampled_unix=NOW_UNIX - 0.5, job_id="4711"),
        GpuProcess(pid=4300, gpu_id=GPU_A, command="python3 train.py", user="alice", trainer="resnet", state="S",
                   kfd=True, sampled_unix=NOW_UNIX - 0.5, job_id="4711"),
        GpuProcess(pid=1800, gpu_id=GPU_A, command="/usr/bin/gnome-shell", user="bob", state="S",
                   vram_bytes=180 * 2**20, gtt_bytes=30 * 2**20, engine_busy_ratio=0.04, sampled_unix=NOW_UNIX - 6),
        GpuProcess(pid=31337, gpu_id=GPU_B, command="python3 old_job.py", user="alice", state="D",
                   vram_bytes=2**30,
                   sampled_unix=NOW_UNIX - 0.5),
    )
    resets = (
        GpuResetState(gpu_id=GPU_A),
        GpuResetState(gpu_id=GPU_B, resets_total=2, last_reset_unix=NOW_UNIX - 60, last_source="devcoredump",
                      last_summary="ring gfx_0.0.0 timed out; VRAM lost; process python3 (pid 31337)",
                      dump_path="/var/lib/gpuwatch/gpu-resets/x-devcd3.txt", recovering=True, stuck_pids=(31337,)),
    )
    snapshot = type(snapshot)(
        taken_unix=snapshot.taken_unix, taken_monotonic=snapshot.taken_monotonic,
        gpus=snapshot.gpus + (gone,), unsupported=snapshot.unsupported, sample_duration_s=snapshot.sample_duration_s,
        processes=processes, processes_unreadable=1, resets=resets,
    )
    fans = (
        FanState(gpu_id=GPU_A, backend="pwm1", mode=FanMode.CURVE, sensor="junction", sensor_temp_c=61.0,
                 target_ratio=0.4, applied_pwm=102, readback_pwm=102, rpm=1450, mode_resets_total=1),
        FanState(gpu_id=GPU_B, backend="gpu_od", mode=FanMode.FAILSAFE, sensor="junction", sensor_temp_c=None,
                 target_ratio=1.0, applied_pwm=255, readback_pwm=0, rpm=0, stalled=True, write_errors_total=2,
                 stalls_total=1, message="junction unreadable: failsafe"),
    )
    trainers = (
        TrainerState(name="resnet", phase=TrainerPhase.RUNNING, gpus=(GPU_A, GPU_B), pid=4242,
                     started_unix=NOW_UNIX - 3600, restarts_total=2,
                     restarts_by_reason=(("crash", 1), ("hung", 1)), pauses_total=3, resumes_total=3,
                     last_exit_code=-9, last_exit_reason="hung", steps_total=12345, steps_per_s=4.5,
                     last_step_age_s=0.25, epoch=7, run_energy_j=1_800_000.0, energy_total_j=2_500_000.0,
                     steps_per_kj=4.5, gpus_used=(GPU_A,),
                     gpu_use=(TrainerGpuUse(gpu_id=GPU_A, processes=2, vram_bytes=12 * 2**20, gtt_bytes=20 * 2**20,
                                            engine_busy_ratio=0.0, kfd_vram_bytes=6 * 2**30,
                                            kfd_cu_occupancy_ratio=0.75),),
                     ranks=2, ranks_held=0, world_size=4),
        TrainerState(name="bert", phase=TrainerPhase.PAUSED, gpus=(GPU_B,), reason="junction over limit",
                     paused_since_unix=NOW_UNIX - 120, ranks=2, ranks_held=2, world_size=2,
                     paused_by="box3: hot: junction 101°C >= 100°C", heartbeat_read_errors_total=2),
        TrainerState(name="vit", phase=TrainerPhase.BACKOFF, restarts_total=1, restarts_by_reason=(("crash", 1),),
                     last_exit_code=1, next_start_unix=NOW_UNIX + 30),
    )
    powers = (
        PowerState(gpu_id=GPU_A, mode=PowerMode.GOVERNING, backend="hwmon", cap_w=245.0, target_cap_w=245.0,
                   original_cap_w=289.0, floor_cap_w=174.0, pause_allowed=False, capped_seconds_total=1800.5,
                   throughput_kept_ratio=0.9465, writes_total=42),
        PowerState(gpu_id=GPU_B, mode=PowerMode.UNAVAILABLE, backend="hwmon", original_cap_w=290.0,
                   write_errors_total=1, reason="power1_cap refuses writes (EACCES)"),
    )
    clocks = (  # issue 36: the clock rung holds GPU_A's ceiling; GPU_B has none it can set
        ClockState(gpu_id=GPU_A, mode=ClockMode.LIMITING, backend="od_table", ceiling_mhz=2300.0,
                   target_ceiling_mhz=2300.0, original_mhz=2500.0, floor_mhz=1500.0, pause_allowed=False,
                   limited_seconds_total=600.0, writes_total=9, resets_total=1),
        ClockState(gpu_id=GPU_B, mode=ClockMode.UNAVAILABLE, reason="no pp_od_clk_voltage; 0 usable level(s)"),
    )
    daemon = DaemonInfo(pid=1234, version="0.1.0", started_unix=NOW_UNIX - 7200, ticks_total=7200,
                        interval_s=1.0, failures=("fan controller: OSError: [Errno 5] EIO",))
    state = PublishedState(snapshot=snapshot, daemon=daemon, fans=fans, trainers=trainers, powers=powers,
                           read_errors_total=((GPU_B, "power1_average", 3),),
                           limits_c=limits_in_force(snapshot, ThermalConfig()), clocks=clocks,
                           # [unmanaged] on_hot = "stop": the desktop client on GPU A held stopped past crit.
                           unmanaged=(UnmanagedState(gpu_id=GPU_A, on_hot="stop", stopped_pids=(1800,), stops_total=2,
                                                     stopped_since_unix=NOW_UNIX - 30,
                                                     reason="junction 110°C at crit 110°C"),
                                      UnmanagedState(gpu_id=GPU_B, on_hot="stop")))
    # The verdict (GPU B's fan failsafe and stuck reset, the GPU that is gone) and job 4711's receipt on GPU A.
    job = JobReceipt(job_id="4711", user="alice", first_seen_unix=NOW_UNIX - 600, last_seen_unix=NOW_UNIX,
                     gpus=(JobGpuReceipt(gpu_id=GPU_A, energy_j=90_000.0, max_temps_c=(("junction", 71.0),),
                                         governed_s=300.0, throttled_s=(("thermal", 12.5),)),))
    state = with_rungs(state)
    return replace(state, health=judge(state, HealthConfig(), {}, snapshot.taken_monotonic), jobs=(job,))


def with_rungs(state: PublishedState, fan: FanConfig | None = None) -> PublishedState:
    """``state`` with its ladder rungs as the daemon computes them (daemon/loop.py) under ``fan``."""
    fan = fan or FanConfig()
    return replace(state, ladder_rungs=tuple((gpu.gpu_id, rung_of(state, gpu.gpu_id, fan.for_gpu(gpu.gpu_id)))
                                             for gpu in state.snapshot.gpus if gpu.up))
