"""One rank of a replica: a Ray actor that holds a model shard (a pipeline stage's layers, split
over the stage's tensor-parallel ranks) and its KV cache.

Ranks are numbered stage-major, `rank = stage * tensor_parallel_size + tp_rank` (vLLM's order):
the ranks of one stage are consecutive and form that stage's tensor-parallel process group
(`engine.parallel.groups`); hidden states go from a rank to the same `tp_rank` of the next
stage (`engine.parallel.pipeline`).
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import ray
import torch
import torch.distributed as dist

from engine.checkpoint_ref import CheckpointRef
from engine.decode_graphs import DecodeGraphSpec
from engine.executor import ModelShard
from engine.fused_layers import use_fused_layers
from engine.gguf_cache import loadable
from engine.kv_budget import MemoryProfile
from engine.kv_layout import AnyKVSpec
from engine.lora.adapter import LoraAdapter
from engine.model_loader import load_model
from engine.parallel.groups import set_tensor_group
from engine.parallel.pipeline import PipelineStage
from engine.parallel.sharding import LinearShard, shard_model
from engine.parallel.stage_layers import StageLayers, keep_stage_layers, stage_layer_ranges
from engine.step_input import StepInput
from engine.step_result import StepResult
from npu_ops.platform import DeviceKind, current_platform

logger = logging.getLogger(__name__)


_GROUP_TIMEOUT = timedelta(seconds=120)
RENDEZVOUS_HOST_ENV = "ASCEND_ROUTER_RENDEZVOUS_HOST"


def rendezvous_host() -> str:
    """The address at which the other ranks reach rank 0's TCP store (called on rank 0).

    `ASCEND_ROUTER_RENDEZVOUS_HOST` if set; else, on Ascend, `HCCL_IF_IP` if set (the
    interface HCCL is told to use); else this node's IP as Ray reports it
    (`ray.util.get_node_ip_address`), so that ranks on other nodes reach it. Gloo picks its own
    interface from `GLOO_SOCKET_IFNAME` and HCCL from `HCCL_IF_IP`/`HCCL_SOCKET_IFNAME`: both
    are read by those libraries from each rank's environment, which Ray passes on.
    """
    override = os.environ.get(RENDEZVOUS_HOST_ENV)
    if override:
        return override
    hccl = os.environ.get("HCCL_IF_IP")
    if hccl and current_platform().kind is DeviceKind.NPU:
        return hccl
    return ray.util.get_node_ip_address()


class RankWorker:
    """Rank `rank` of `world` of a replica's ranks (tensor x pipeline); holds one model shard.

    Made a Ray actor with `ray.remote(RankWorker)` by the executor (decorating the class here
    would make Ray pickle its methods by value instead of by reference). Start-up is three
    calls: rank 0's `open_rendezvous` binds the group's TCP store on a port the OS picks (no
    pick-then-bind race with other processes) and says where it is (`rendezvous_host`), every
    rank's `join(host, port)`, then `load`.

    Args:
        rank: this rank.
        world: all ranks of the replica (`tensor_parallel_size * pipeline_parallel_size`).
        num_threads: CPU intra-op threads for this rank.
        tensor_parallel_size: ranks per pipeline stage (default: `world`, one stage).
    """

    def __init__(
        self, rank: int, world: int, num_threads: int, tensor_parallel_size: int | None = None
    ) -> None:
        torch.set_num_threads(num_threads)
        self.rank = rank
        self.world = world
        self.tp = world if tensor_parallel_size is None else tensor_parallel_size
        self.stage_index, self.tp_rank = divmod(rank, self.tp)
        self.stages = world // self.tp
        self._store: dist.TCPStore | None = None
        self.pipeline: PipelineStage | None = None

    def open_rendezvous(self) -> tuple[str, int]:
        """Rank 0 only: bind the group's TCP store on an OS-chosen port (every interface);
        return the host the other ranks reach it at, and the port."""
        host = rendezvous_host()
        self._store = dist.TCPStore(
            host,
            0,
            self.world,
            is_master=True,
            wait_for_workers=False,
            timeout=_GROUP_TIMEOUT,
        )
        return host, int(self._store.port)

    def join(self, host: str, port: int) -> None:
        """Join the process group through rank 0's store at `host:port`.

        Raises:
            torch.distributed.DistError: the group did not form within 120 s.
        """
        if self._store is None:
            self._store = dist.TCPStore(
                host, port, self.world, is_master=False, timeout=_GROUP_TIMEOUT
            )
        dist.init_process_group(
            current_platform().dist_backend,
            store=self._store,
            rank=self.rank,
            world_size=self.world,
            timeout=_GROUP_TIMEOUT,
        )
        if self.stages > 1:  # every rank creates every stage's group, in the same order
            for stage in range(self.stages):
                ranks = list(range(stage * self.tp, (stage + 1) * self.tp))
                group = dist.new_group(ranks, timeout=_GROUP_TIMEOUT)
                if stage == self.stage_index:
                    set_tensor_group(group)

    def load(
        self,
        checkpoint: str,
        spec: AnyKVSpec,
        block_size: int,
        dtype: torch.dtype,
        expert_parallel: bool,
        graphs: DecodeGraphSpec | None = None,
        lora: bool = False,
        layer_partition: list[int] | None = None,
    ) -> None:
        """Load the checkpoint and keep this rank's shard (its stage's layers, then its
        tensor-parallel share of them).

        Args:
            checkpoint: checkpoint path.
            spec: per-rank KV geometry.
            block_size: tokens per block.
            dtype: weights dtype.
            expert_parallel: split MoE experts across ranks instead of each expert's width.
            graphs: decode steps to run as captured graphs (None: every step eager).
            lora: wrap the linears for LoRA adapters, sharded like their base layers.
            layer_partition: decoder layers per pipeline stage (None: an even split).

        Raises:
            ValueError: a layer partition that does not fit the model
                (`engine.parallel.stage_layers.stage_layer_ranges`), or a width not divisible
                by the tensor parallel size.
        """
        platform = current_platform()
        device = platform.device(0)  # Ray sets the visible-devices variable per actor
        model = load_model(
            loadable(CheckpointRef.from_path(checkpoint)), dtype, device, fused_layers=False
        )
        stage = None
        if self.stages > 1:
            num_layers = int(model.config.num_hidden_layers)
            ranges = stage_layer_ranges(num_layers, self.stages, layer_partition)
            stage = StageLayers(self.stage_index, self.stages, ranges[self.stage_index], num_layers)
            keep_stage_layers(model, stage)
        plan: dict[str, LinearShard] = {}
        shard_model(model, model.config, self.tp_rank, self.tp, expert_parallel, plan)
        use_fused_layers(model)
        self.shard = ModelShard(model, spec, block_size, device, graphs, lora, plan, stage)
        logger.info(
            "rank %d/%d ready on %s (%s)%s",
            self.rank,
            self.world,
            device,
            platform.dist_backend,
            "" if stage is None else f", pipeline stage {stage.index}: layers {stage.layers}",
        )

    def profile(self, num_tokens: int) -> MemoryProfile:
        """See `ModelShard.profile`."""
        return self.shard.profile(num_tokens)

    def allocate_kv(self, num_blocks: int) -> None:
        """See `ModelShard.allocate_kv` (the same block count on every rank)."""
        self.shard.allocate_kv(num_blocks)
        stage = self.shard.stage
        if stage is not None:
            assert self.shard.runner is not None
            config = self.shard.model.config
            self.pipeline = PipelineStage(
                self.shard.runner,
                stage,
                None if stage.first else self.rank - self.tp,
                None if stage.last else self.rank + self.tp,
                int(config.hidden_size),
                self.shard.model.dtype,
                self.shard.device,
            )

    def capture(self, size: int) -> None:
        """See `ModelShard.capture` (every rank at once: the graph holds the collectives)."""
        self.shard.capture(size)

    def execute(self, step: StepInput) -> StepResult | None:
        """Run the step on this shard; the last stage's tensor-parallel rank 0 returns the result
        (on the CPU), the others None."""
        if self.pipeline is not None:
            result = self.pipeline.execute(step)
            return result.cpu() if result is not None and self.tp_rank == 0 else None
        result = self.shard.execute(step)
        return result.cpu() if self.rank == 0 else None

    def lora_targets(self) -> dict[str, tuple[int, int]]:
        """See `ModelShard.lora_targets` (unsharded shapes, the same on every rank)."""
        return self.shard.lora_targets()

    def add_lora(self, adapter: LoraAdapter) -> None:
        """See `ModelShard.add_lora`: this rank keeps its share of the adapter."""
        self.shard.add_lora(adapter)

    def remove_lora(self, lora_id: int) -> None:
        """See `ModelShard.remove_lora`."""
        self.shard.remove_lora(lora_id)

    def shutdown(self) -> None:
        """Leave the process group."""
        set_tensor_group(None)
        if dist.is_initialized():
            dist.destroy_process_group()
