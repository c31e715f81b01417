"""Prompts: the prompt cases a user brings (``cases``, ``case_plan``), beside the shared
planner they reuse.

The shipped corpus, templated-length measurement and residue targeting live in the leaf
``engine.prompts`` (the tiny models' tools train on the same prompts and must not import
the harness); they are re-exported here, so a sweep's prompts are one import away.
"""
from engine.prompts import (INSTRUCTION, PAD_CANDIDATES, Calibration, ChatTokenizer, PlanError,
                            PromptPlan, TemplateError, approx_line_counts, calibrate,
                            corpus_lines, document_lines, own_document_plan, plan,
                            plan_residue, prompt_content)

from .case_plan import (CaseCalibration, CaseTooLong, calibrate_case, plan_case, plan_case_residues,
                        prompt_sha1)
from .cases import CaseFileError, PromptCase, load_cases, select_cases

__all__ = ["document_lines", "corpus_lines", "prompt_content", "PAD_CANDIDATES", "INSTRUCTION", "Calibration", "PlanError", "PromptPlan",
           "calibrate", "plan", "plan_residue", "own_document_plan", "approx_line_counts", "ChatTokenizer", "TemplateError",
           "CaseCalibration", "CaseTooLong", "calibrate_case", "plan_case", "plan_case_residues", "prompt_sha1",
           "CaseFileError", "PromptCase", "load_cases", "select_cases"]
