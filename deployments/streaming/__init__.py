"""Engine tokens -> what the client receives: incremental detokenisation, stop strings,
logprob objects, tool-call deltas and the SSE bytes the router relays."""
