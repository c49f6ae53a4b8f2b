"""Multi-LoRA serving: PEFT adapters read and checked against the base model
(`adapter_config`, `adapter`), held in host memory (`host_cache`), applied batched by
`LoraLinear` wrappers around the model's linears (`layer`, `model`), and managed for the engine
(`manager`)."""
