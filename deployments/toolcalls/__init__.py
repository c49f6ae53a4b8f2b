"""The tool-call response layer: per-family parsers and the OpenAI message assembly.

Entry points: `registry.get_parser` (a stateful parser per response), `assemble.assemble` /
`assemble.StreamAssembler` (events to message fields or streaming deltas) and
`choice.apply_tool_choice`. The contract is `shared/toolcalls/PROTOCOL.md`.
"""
