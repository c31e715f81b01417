"""The prompt text both sides share: the shipped corpus, templated length, residue targeting.

A leaf: it imports nothing of this project. The harness plans every sweep's prompts with
it (``harness.prompts`` re-exports it beside the prompt cases a user brings), and the
tiny models' tools (``engine.tinymodel``: tokenizer, training data, probes) build and
train on exactly the prompts a sweep sends, without importing the harness
(``engine/`` never imports ``harness/``: tests/harness/test_layout.py).

- ``corpus``      the seeded, original document text (any length, every line unique)
- ``templating``  ``ChatTokenizer``: a prompt's chat-templated length, computed locally
- ``planner``     calibrate a padding unit, then one prompt per residue, verified
"""
from .corpus import corpus_lines, document_lines
from .planner import (INSTRUCTION, PAD_CANDIDATES, WARMUP_ASSISTANT, WARMUP_FOLLOWUP, Calibration,
                      CountMany, PlanError, PromptPlan, approx_line_counts, calibrate,
                      own_document_plan, plan, plan_residue, prompt_content)
from .templating import ChatTokenizer, TemplateError

__all__ = ["document_lines", "corpus_lines", "prompt_content", "PAD_CANDIDATES", "INSTRUCTION",
           "WARMUP_ASSISTANT", "WARMUP_FOLLOWUP", "Calibration", "CountMany", "PlanError",
           "PromptPlan", "calibrate", "plan", "plan_residue", "own_document_plan",
           "approx_line_counts", "ChatTokenizer", "TemplateError"]
