"""Prompts: shipped corpus, templated-length measurement, residue targeting."""
from .case_plan import (CaseCalibration, CaseTooLong, calibrate_case, plan_case, plan_case_residues,
                        prompt_sha1)
from .cases import CaseFileError, PromptCase, load_cases, select_cases
from .corpus import corpus_lines, document_lines
from .planner import (INSTRUCTION, PAD_CANDIDATES, Calibration, PlanError, PromptPlan,
                      approx_line_counts, calibrate, own_document_plan, plan, plan_residue,
                      prompt_content)
from .templating import ChatTokenizer, TemplateError

__all__ = ["document_lines", "corpus_lines", "prompt_content", "PAD_CANDIDATES", "INSTRUCTION", "Calibration", "PlanError", "PromptPlan",
           "calibrate", "plan", "plan_residue", "own_document_plan", "approx_line_counts", "ChatTokenizer", "TemplateError",
           "CaseCalibration", "CaseTooLong", "calibrate_case", "plan_case", "plan_case_residues", "prompt_sha1",
           "CaseFileError", "PromptCase", "load_cases", "select_cases"]
