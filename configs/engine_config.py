"""Engine settings (the `engine` section of a model deployment)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from configs.lora_config import LoraConfig
from configs.slo_config import SloConfig
from configs.speculative_config import SpeculativeConfig


class EngineConfig(BaseModel):
    """How one engine replica batches, caches and computes."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _int8_activations_need_int4(self) -> EngineConfig:
        if self.activation_quantization != "none" and self.weight_quantization != "int4":
            raise ValueError("activation_quantization: int8 needs weight_quantization: int4")
        return self

    @model_validator(mode="after")
    def _graphs_are_not_batch_invariant(self) -> EngineConfig:
        if not self.enforce_eager and self.batch_invariant:
            raise ValueError(
                "enforce_eager: false and batch_invariant: true exclude each other: decode rows "
                "of a step that also prefills run eager, the others as captured graphs, so a "
                "token's kernels would depend on its neighbours"
            )
        return self

    @model_validator(mode="after")
    def _drafting_model_without_lora(self) -> EngineConfig:
        spec = self.speculative
        if spec is not None and spec.method != "ngram" and self.lora is not None:
            raise ValueError(
                f"speculative method {spec.method!r} and LoRA exclude each other (the drafting "
                "model has no adapters); use method: ngram"
            )
        return self

    @model_validator(mode="after")
    def _pipeline_stages(self) -> EngineConfig:
        pp, partition = self.pipeline_parallel_size, self.pipeline_layer_partition
        if partition is not None and len(partition) != pp:
            raise ValueError(
                f"pipeline_layer_partition {partition} has {len(partition)} entries; give one "
                f"layer count per stage (pipeline_parallel_size={pp})"
            )
        if partition is not None and min(partition) < 1:
            raise ValueError(
                f"pipeline_layer_partition {partition}: every stage needs at least one layer"
            )
        if pp == 1:
            return self
        refused = {
            "speculative": self.speculative is not None,
            "lora": self.lora is not None,
            "enforce_eager: false": not self.enforce_eager,
        }
        if any(refused.values()):
            names = ", ".join(name for name, on in refused.items() if on)
            raise ValueError(
                f"pipeline_parallel_size={pp} does not run with {names}; turn it off or use "
                "pipeline_parallel_size: 1 (docs/pipeline-parallel.md)"
            )
        return self

    @model_validator(mode="after")
    def _slo_floor_under_the_cap(self) -> EngineConfig:
        if self.slo is not None and self.slo.min_num_seqs > self.max_num_seqs:
            raise ValueError(
                f"slo.min_num_seqs {self.slo.min_num_seqs} is over max_num_seqs "
                f"{self.max_num_seqs}: lower it or raise max_num_seqs"
            )
        return self

    @field_validator("graph_batch_sizes")
    @classmethod
    def _graph_sizes_ascending(cls, sizes: list[int]) -> list[int]:
        if any(s <= 0 for s in sizes) or len(set(sizes)) != len(sizes):
            raise ValueError(f"graph_batch_sizes must be distinct positive sizes, got {sizes}")
        return sorted(sizes)

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Weights/activations dtype. `auto` = bfloat16 on NPU/CUDA and on CPUs with "
        "native bf16 (AVX512-BF16/AMX), else float32. Exact comparisons with transformers need "
        "float32.",
    )
    block_size: int = Field(16, gt=0, le=1024, description="Tokens per KV-cache block.")
    kv_cache_dtype: Literal["auto", "int8", "fp8_e4m3"] = Field(
        "auto",
        description="KV-cache element type. `auto` = the model dtype; `int8` / `fp8_e4m3` = "
        "8-bit codes with one float16 scale per token and K/V head (dynamic, no calibration), "
        "(head_dim + 2) / (2 * head_dim) of a bfloat16 cache's bytes (51.6% at head_dim 64, "
        "50.8% at 128). Not for DeepSeek-V4. See docs/kv-cache.md.",
    )
    kv_cache_memory_bytes: int = Field(
        512 << 20,
        gt=0,
        description=(
            "CPU only: bytes of host memory for this replica's KV cache (every replica and Ray "
            "share host memory, so the budget is explicit). Default 512 MiB."
        ),
    )
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="NPU/CUDA: fraction of device memory the replica may use (weights+KV+acts).",
    )
    num_kv_blocks: int | None = Field(
        None, gt=0, description="Hand-set KV block count; overrides the memory-derived one."
    )
    enable_prefix_caching: bool = Field(
        True, description="Share KV blocks of identical prompt prefixes across requests."
    )
    max_num_seqs: int = Field(64, gt=0, description="Sequences in the running batch at most.")
    max_num_batched_tokens: int = Field(
        2048, gt=0, description="Tokens per engine step at most (prefill chunks + decodes)."
    )
    max_model_len: int | None = Field(
        None, gt=0, description="Context length in tokens; default: the checkpoint's."
    )
    encoder_cache_items: int = Field(
        0,
        ge=0,
        description=(
            "Image/audio encoder outputs kept across requests (LRU by content hash), so a "
            "repeated image is encoded once; 0 keeps each only for its request's prefill. "
            "Multimodal models only."
        ),
    )
    rank_num_cpus: float = Field(
        0.25, gt=0, description="CPUs each tensor-parallel rank actor reserves in Ray."
    )
    placement_timeout_s: float = Field(
        60.0, gt=0, description="Seconds to wait for the ranks' devices before failing."
    )
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        description="Pipeline stages per replica: the decoder layers are split into this many "
        "consecutive stages, each on `tensor_parallel_size` ranks (a replica has tensor x "
        "pipeline ranks); each step's batch flows through the stages as micro-batches so that "
        "stages overlap. Not with speculative decoding, LoRA, graph mode or DeepSeek-V4 "
        "(docs/pipeline-parallel.md).",
    )
    pipeline_layer_partition: list[int] | None = Field(
        None,
        description="Decoder layers per pipeline stage, first stage first (vLLM's "
        "VLLM_PP_LAYER_PARTITION); must have `pipeline_parallel_size` positive entries summing "
        "to the model's layer count. None: an even split, the remainder on the stages before "
        "the last (which also holds the output projection).",
    )
    tensor_parallel_placement: Literal["STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD"] = Field(
        "STRICT_PACK",
        description="Ray placement-group strategy of the tensor-parallel ranks (of every "
        "pipeline stage: all of a replica's ranks are one group): `STRICT_PACK` "
        "keeps them on one node (collectives stay inside it); `PACK` prefers one node; "
        "`SPREAD`/`STRICT_SPREAD` put them on different nodes (a model wider than one node). "
        "Rank 0's node IP as Ray reports it is where the other ranks meet "
        "(`engine.parallel.worker.rendezvous_host`).",
    )
    enforce_eager: bool = Field(
        True,
        description=(
            "Run every step op by op (vLLM's enforce_eager). False = graph mode: decode steps are "
            "padded to the next of graph_batch_sizes and replay a graph compiled for that size in "
            "the background once the replica serves (until then that size runs eager; "
            "torch.compile/inductor on CPU, needing a C++ compiler; CUDA graphs, needing "
            "triton; torchair's ACL graphs on Ascend, needing the `torchair` package, else "
            "start-up fails naming it); prefill and mixed steps run eager. SmolLM2 bf16 + int4 "
            "on 2 CPU cores: decode step 15.7 -> 8.4 ms at batch 1, 30.9 -> 20.9 ms at 16 "
            "(load_tests/graph_mode.py). Excludes batch_invariant: true."
        ),
    )
    graph_batch_sizes: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16],
        min_length=1,
        description=(
            "Graph mode: the decode batch sizes compiled, smallest first, in the background while "
            "the replica already serves (vLLM's cudagraph_capture_sizes). A decode step of D "
            "sequences runs as the graph of the smallest size >= D, padded, once that graph is "
            "compiled; larger decode steps, prefill and mixed steps run eager. Each size costs its "
            "compile time at a cold start, its steps eager meanwhile (see docs/graph-mode.md)."
        ),
    )
    compile_cache_dir: str | None = Field(
        None,
        description=(
            "Graph mode: inductor's on-disk compile cache (TORCHINDUCTOR_CACHE_DIR), so that a "
            "restarted or replacement replica loads its graphs instead of compiling them. "
            "Default: inductor's own, /tmp/torchinductor_<user>."
        ),
    )
    weight_quantization: Literal["none", "int4"] = Field(
        "none",
        description=(
            "`int4`: weight-only int4 linears, 32 weights per scale/zero (GGUF Q4_1's block; "
            "exact for Q4_1 GGUFs such as the SmolLM2 file), activations and output projection "
            "in `dtype`; see engine/quantization/weight_int4.py. CPU runs torch's int4 kernel for "
            "generated (decode) tokens and keeps a dense copy for prompt (prefill) tokens "
            "(speed, not memory); other devices a dequantising reference. Tensor parallel size 1 "
            "only."
        ),
    )
    activation_quantization: Literal["none", "int8"] = Field(
        "none",
        description=(
            "With `weight_quantization: int4` on an x86 CPU with AVX512-VNNI: `int8` quantises "
            "the int4 linears' activations to int8 per 32 values (ggml's Q8_0 block, as "
            "llama.cpp does for its Q4 dot products) and runs them as integer dot products that "
            "read the weights once per call (npu_ops/cpu_kernels), for prompt and generated "
            "tokens alike: SmolLM2 linears at decode batch 16 take 13.3 ms instead of 21.5, a "
            "640-token prefill 315 ms instead of 353, and no dense bf16 copy of the weights is "
            "kept. Changes the numbers by the activation rounding. Compiled once per host "
            "(~25 s, cached); a CPU without VNNI keeps torch's kernel and logs why."
        ),
    )
    output_quantization: Literal["none", "int8"] = Field(
        "none",
        description=(
            "`int8`: CPU keeps a per-channel int8 copy of the output projection (lm_head) and "
            "uses it for steps whose head input has at most 4 rows (SmolLM2, bfloat16: 3.0 -> "
            "1.7 ms on two threads, 6.0 -> 3.4 ms on one); larger steps use the float weight. "
            "With activation_quantization: int8 on an x86 CPU with AVX512-VNNI the head's input "
            "is quantised to int8 per 32 values too (Q8_0, as llama.cpp does) and the copy runs "
            "on our int8 x int8 kernel at every step size (batch 1, one thread: 3.6 -> 0.6 ms). "
            "Costs the copy's bytes (vocab x hidden) and moves logits by the int8 rounding, so "
            "greedy output can differ from `none`; see engine/quantization/int8_head.py."
        ),
    )
    batch_invariant: bool = Field(
        False,
        description=(
            "True: a token's logits are computed by the same kernels whatever it shares a step "
            "with, so a request's output never depends on the other requests (int4 decode "
            "always through the int4 GEMV, the int8 output copy at every batch size). Costs "
            "speed at larger decode batches (SmolLM2 bfloat16 + int4 with torch's int4 kernel: "
            "42 ms of linears at batch 32 against 35 ms through the dense copy; the int8 output "
            "copy at batch 16: 10.8 ms against 5.1 ms for the float head). False: decode steps "
            "of 24 or more generated tokens use the dense copy (not with "
            "`activation_quantization: int8`, whose kernel is batch invariant and faster) and "
            "steps of more than 4 rows the float output projection; that changes the summation "
            "order, so a rare near-tie can resolve differently at another load. LoRA rows: "
            "each adapter's update in a fixed summation order (engine/lora/invariant.py), about "
            "twice the LoRA step time."
        ),
    )
    num_threads: int | None = Field(
        None, gt=0, description="CPU: torch intra-op threads (default: all host cores)."
    )
    single_thread_max_tokens: int = Field(
        0,
        ge=0,
        description=(
            "CPU: a step of at most this many tokens (a small decode batch) runs on one "
            "intra-op thread instead of `num_threads`, leaving the other cores to the processes "
            "that share the host (HTTP proxy, router, detokenisation): when they preempt one of "
            "two threads, every op of the step waits at the team's barrier. Outputs are the same "
            "bits either way. 0: every step uses `num_threads`."
        ),
    )
    thread_niceness: int | None = Field(
        None,
        ge=-20,
        le=19,
        description=(
            "Linux niceness of the engine's thread and of the CPU worker threads it starts (its "
            "OpenMP team), set before the model loads. Ray starts every worker process at "
            "niceness 15 (`RAY_worker_niceness`), below Ray's own daemons, the clients and any "
            "other process of the host, so on a small host the engine's threads lose their "
            "core to them mid-step, and with two threads the other one waits at each op's "
            "barrier. 0 gives the engine the priority of the host's other processes (a value "
            "below the worker's 15 needs CAP_SYS_NICE, e.g. root; without it the replica logs "
            "a warning and keeps 15). The replica's other threads (HTTP, detokenisation) keep "
            "the worker's niceness. None: leave it."
        ),
    )
    lora: LoraConfig | None = Field(
        None,
        description="Multi-LoRA serving (`configs.lora_config`): adapters, `max_loras`, "
        "`max_lora_rank`, `max_cpu_loras`. None: LoRA off (no adapter can be loaded, and the "
        "linears are not wrapped).",
    )
    speculative: SpeculativeConfig | None = Field(
        None,
        description="Speculative decoding (`configs.speculative_config`): `method: ngram` "
        "(prompt lookup, `prompt_lookup_min`/`_max`), `draft` (a smaller model, `model`) or "
        "`mtp` (DeepSeek-V3's multi-token-prediction layer), with `num_speculative_tokens`. "
        "`draft` and `mtp` run with tensor_parallel_size 1 and without LoRA. Greedy "
        "output is unchanged and sampled output keeps its distribution (rejection sampling); "
        "requests with a grammar (tool_choice, response_format) do not speculate. In graph mode a "
        "step's draft tokens count as decode rows toward its graph size. None: off.",
    )
    slo: SloConfig | None = Field(
        None,
        description="Latency targets for batch sizing (`configs.slo_config`): `tpot_ms` (p90 of "
        "the decode steps' wall time), `ttft_ms` (p90 of queued -> first token), `window_steps`, "
        "`min_num_seqs`, `decrease_factor`, `increase_margin`. While set, `max_num_seqs` and "
        "`max_num_batched_tokens` become ceilings: the engine lowers its admission limits when "
        "the p90 is over target and raises them while requests wait and there is room "
        "(`engine.slo_controller`); running sequences are never preempted by a lowered limit, "
        "and outputs do not change. The limits are metrics "
        "(`ascend_router_engine_max_num_seqs`, ...). None: fixed limits.",
    )
