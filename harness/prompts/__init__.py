"""Prompts: shipped corpus, templated-length measurement, residue targeting."""
from .corpus import document_lines
from .planner import (INSTRUCTION, Calibration, PlanError, PromptPlan, calibrate, plan,
                      plan_residue)
from .templating import ChatTokenizer, TemplateError

__all__ = ["document_lines", "INSTRUCTION", "Calibration", "PlanError", "PromptPlan",
           "calibrate", "plan", "plan_residue", "ChatTokenizer", "TemplateError"]
