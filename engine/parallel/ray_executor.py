"""Runs steps on `tensor_parallel_size x pipeline_parallel_size` rank actors placed in one Ray
placement group.

Each rank asks Ray for one `NPU` (Ascend) or one `GPU` (CUDA), or `rank_num_cpus` of a CPU here,
in one placement group (`engine.tensor_parallel_placement`; by default `STRICT_PACK`: one node,
so the group's collectives stay local). The ranks meet at rank 0's node IP as Ray reports it
(`engine.parallel.worker.rendezvous_host`). The engine (scheduler) sends every rank the same
`StepInput`; rank 0 returns the `StepResult`, or under pipeline parallel the last stage's first
rank (ranks are stage-major: `engine.parallel.worker`).
"""

from __future__ import annotations

import logging

import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from engine.decode_graphs import DecodeGraphSpec
from engine.executor import ExecutorDead
from engine.kv_budget import MemoryProfile
from engine.kv_layout import AnyKVSpec
from engine.lora.adapter import LoraAdapter
from engine.parallel.worker import RankWorker
from engine.step_input import StepInput
from engine.step_result import StepResult
from npu_ops.platform import DeviceKind, current_platform

logger = logging.getLogger(__name__)


def rank_bundle(rank_num_cpus: float) -> dict[str, float]:
    """Ray resources of one rank on this platform."""
    platform = current_platform()
    if platform.kind is DeviceKind.CPU:
        return {"CPU": rank_num_cpus}
    return {"CPU": rank_num_cpus, platform.ray_resource: 1.0}


class RayExecutor:
    """Tensor/expert/pipeline-parallel executor.

    Args:
        checkpoint: checkpoint path.
        world: tensor parallel size (ranks per pipeline stage).
        expert_parallel: split routed experts across ranks.
        spec: per-rank KV geometry.
        block_size: tokens per block.
        dtype: weights dtype.
        rank_num_cpus: CPUs each rank reserves.
        placement_timeout_s: how long to wait for the ranks' resources.
        graphs: decode steps to run as captured graphs on every rank (None: every step eager).
        lora: wrap every rank's linears for LoRA adapters (sharded like their base layers).
        strategy: the placement group's strategy (`STRICT_PACK`, `PACK`, `SPREAD`,
            `STRICT_SPREAD`).
        pipeline_stages: pipeline parallel size: `world * pipeline_stages` ranks in all.
        layer_partition: decoder layers per stage (None: an even split).

    Raises:
        RuntimeError: the placement group was not placed in time (names the resources asked
            for and what the cluster has), or a rank failed to start.
        ValueError: a layer partition that does not fit the model.
    """

    def __init__(
        self,
        checkpoint: str,
        world: int,
        expert_parallel: bool,
        spec: AnyKVSpec,
        block_size: int,
        dtype: torch.dtype,
        rank_num_cpus: float,
        placement_timeout_s: float,
        graphs: DecodeGraphSpec | None = None,
        lora: bool = False,
        strategy: str = "STRICT_PACK",
        pipeline_stages: int = 1,
        layer_partition: list[int] | None = None,
    ) -> None:
        self.tp = tp = world
        self.stages = pipeline_stages
        world = tp * pipeline_stages
        self.answering_rank = (pipeline_stages - 1) * tp
        """The rank whose `execute` returns the step's result: the last stage's first."""
        bundle = rank_bundle(rank_num_cpus)
        self.pg = placement_group([bundle] * world, strategy=strategy)
        self._graphs_in_use: frozenset[int] = frozenset()
        ready, _ = ray.wait([self.pg.ready()], timeout=placement_timeout_s)
        if not ready:
            remove_placement_group(self.pg)
            raise RuntimeError(
                f"{_layout(tp, pipeline_stages)} needs {world} x {bundle} ({strategy}), but Ray "
                f"could not place them within {placement_timeout_s:.0f}s (cluster resources: "
                f"{ray.cluster_resources()}, available: {ray.available_resources()})"
            )
        threads = max(1, int(rank_num_cpus)) if rank_num_cpus >= 1 else 1
        resources = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
        self.workers = [
            ray.remote(RankWorker)
            .options(
                num_cpus=bundle["CPU"],
                num_gpus=bundle.get("GPU", 0),
                resources=resources,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, rank),
            )
            .remote(rank, world, threads, tp)
            for rank in range(world)
        ]
        try:
            host, port = ray.get(
                self.workers[0].open_rendezvous.remote(), timeout=placement_timeout_s
            )
            joins = [w.join.remote(host, port) for w in self.workers]
            ray.get(joins, timeout=placement_timeout_s)
            loads = [
                w.load.remote(
                    checkpoint,
                    spec,
                    block_size,
                    dtype,
                    expert_parallel,
                    graphs,
                    lora,
                    layer_partition,
                )
                for w in self.workers
            ]
            ray.get(loads, timeout=placement_timeout_s)
        except Exception:
            self.shutdown()
            raise
        logger.info("%s: %d ranks of %s each", _layout(tp, pipeline_stages), world, bundle)

    def profile(self, num_tokens: int) -> MemoryProfile:
        """See `Executor.profile`: the rank with the least room left decides."""
        return min(self.stage_profiles(num_tokens), key=_room)

    def stage_profiles(self, num_tokens: int) -> list[MemoryProfile]:
        """`profile` per pipeline stage, first stage first: each the stage's tightest rank (a
        stage holds KV for its own layers only, so each stage is sized apart)."""
        profiles = ray.get([w.profile.remote(num_tokens) for w in self.workers])
        return [
            min(profiles[s * self.tp : (s + 1) * self.tp], key=_room) for s in range(self.stages)
        ]

    def allocate_kv(self, num_blocks: int) -> None:
        """See `Executor.allocate_kv`."""
        ray.get([w.allocate_kv.remote(num_blocks) for w in self.workers])

    concurrent_capture = False  # a capture step's collectives would interleave with steps'

    def capture(self, size: int) -> None:
        """See `Executor.capture`: every rank captures at once."""
        ray.get([w.capture.remote(size) for w in self.workers])
        self._graphs_in_use = self.decode_graphs_in_use() | {size}

    def decode_graphs_in_use(self) -> frozenset[int]:
        """See `Executor.decode_graphs_in_use` (every rank's: they capture together)."""
        return self._graphs_in_use

    def execute(self, step: StepInput) -> StepResult:
        """See `Executor.execute`.

        Raises:
            ExecutorDead: a rank's actor died or became unreachable (its node left the cluster,
                say): the ranks' collectives cannot run again without it.
            ray.exceptions.RayTaskError: a rank raised in this step (the ranks live on).
        """
        refs = [w.execute.remote(step) for w in self.workers]
        try:
            outs = ray.get(refs)
        except (ray.exceptions.RayActorError, ray.exceptions.RaySystemError) as exc:
            rank = next((r for r, ref in enumerate(refs) if _failed(ref)), None)
            who = "a rank" if rank is None else f"rank {rank}"
            if rank is not None and self.stages > 1:
                who += f" (pipeline stage {rank // self.tp})"
            raise ExecutorDead(f"tensor-parallel {who} of {len(refs)} died: {exc}") from exc
        result: StepResult = outs[self.answering_rank]
        return result

    def lora_targets(self) -> dict[str, tuple[int, int]]:
        """See `Executor.lora_targets` (rank 0's answer; every rank has the same)."""
        targets: dict[str, tuple[int, int]] = ray.get(self.workers[0].lora_targets.remote())
        return targets

    def add_lora(self, adapter: LoraAdapter) -> None:
        """See `Executor.add_lora`: the whole adapter goes to every rank, which keeps its
        share."""
        ref = ray.put(adapter)
        ray.get([w.add_lora.remote(ref) for w in self.workers])

    def remove_lora(self, lora_id: int) -> None:
        """See `Executor.remove_lora`."""
        ray.get([w.remove_lora.remote(lora_id) for w in self.workers])

    def shutdown(self) -> None:
        """Stop the ranks and free their resources."""
        try:
            ray.get([w.shutdown.remote() for w in self.workers], timeout=30)
        except ray.exceptions.RayError:
            logger.warning("a rank failed while shutting down", exc_info=True)
        finally:
            for w in self.workers:
                ray.kill(w)
            remove_placement_group(self.pg)


def _layout(tp: int, pp: int) -> str:
    """The ranks' layout in the config's words."""
    return f"tensor_parallel_size={tp}" + ("" if pp == 1 else f" x pipeline_parallel_size={pp}")


def _room(profile: MemoryProfile) -> int:
    """Bytes a rank has left for its KV cache before the utilisation cap."""
    return profile.total - profile.weights - profile.peak_activations


def _failed(ref: ray.ObjectRef) -> bool:
    """Whether a finished task's result is an actor failure (False while it runs)."""
    ready, _ = ray.wait([ref], timeout=0)
    if not ready:
        return False
    try:
        ray.get(ref, timeout=0)
    except (ray.exceptions.RayActorError, ray.exceptions.RaySystemError):
        return True
    except Exception:  # noqa: BLE001 - another failure of that rank: not the dead one
        return False
    return False
