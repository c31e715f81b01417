#!/usr/bin/env bash
# The action's comment step (action.yml): the report as one comment on the pull request
# (or on COMMENT_ISSUE), updated on every push, through harness.publish.github_rest. Inputs arrive
# in the environment. A comment GitHub refuses (say, a fork's read-only token) is a
# warning, not a failure: the sweep's own exit code gates the job.
set -uo pipefail

args=(--repo "${REPO:?}" --marker "${COMMENT_MARKER:?}")
if [ -n "${COMMENT_ISSUE:-}" ]; then
  args+=(--issue "$COMMENT_ISSUE")
elif [ -n "${PR_NUMBER:-}" ]; then
  args+=(--pr "$PR_NUMBER")
else
  echo "not a pull request and no comment-issue: nothing to comment on"
  exit 0
fi
if [ "${COMMENT_MODE:-true}" = "dry-run" ]; then args+=(--dry-run); fi

python -m harness.publish.github_rest "${args[@]}" "${REPORT:?}"
code=$?
if [ "$code" -ne 0 ]; then
  echo "::warning::the report was not commented (github_rest exit $code: 2 usage or no token, 10 token refused, 11 not found, 12 rejected, 13 unreachable)"
fi
exit 0
