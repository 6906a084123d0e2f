"""Model-backed compressors: prompts, reply parsing, the three transports and the capped compressor."""

from memcairn.capture.llm.api_clients import AnthropicClient, OpenAIClient
from memcairn.capture.llm.claude_cli import CAPTURE_CHILD_ENV, ClaudeCliClient
from memcairn.capture.llm.compressor import LlmCompressor, make_compressor
from memcairn.capture.llm.transport import LlmClient, ReplyFailed
from memcairn.capture.llm.xmlparse import classify_reply, parse_observations, parse_summary

__all__ = [
    "CAPTURE_CHILD_ENV",
    "AnthropicClient",
    "ClaudeCliClient",
    "LlmClient",
    "LlmCompressor",
    "OpenAIClient",
    "ReplyFailed",
    "classify_reply",
    "make_compressor",
    "parse_observations",
    "parse_summary",
]
