"""A compaction summary's errors and files cut by headings read as one observation each."""

from __future__ import annotations

from memcairn.capture.recap import recap_observations

# The shape Claude Code 2.1 writes: a numbered section, then a heading per error with labelled bullets under it.
SUMMARY = """Summary:
## 3. Files and Code Sections:

### `checkpoint/validators.go`
- **Why**: Created to break the import cycle
- **Key Code**:
```go
func ValidateSessionID(id string) error { return nil }
```

## 4. Errors and Fixes:

### Error 1: Linter nolint directive unused
- **Error**: `directive //nolint:errcheck,gosec is unused for linter "errcheck"`
- **Fix**: Removed `errcheck` from directive, kept only `gosec`
- **File**: `strategy/session_state.go:85`

### Error 2: Import cycle when moving to session
- **Error**: `paths` -> `session` -> `checkpoint` -> `paths` circular dependency
- **Root Cause**:
  - `checkpoint` needs `ValidateSessionID()` for security
- **Solution**: Move validators to `checkpoint` package

## 5. Pending Tasks:
- Fix the compile errors
"""


def test_each_headed_error_is_one_observation_with_its_bullets_as_facts() -> None:
    errors = [o for o in recap_observations(SUMMARY) if o.type == "bugfix"]
    assert [o.title for o in errors] == ["Linter nolint directive unused", "Import cycle when moving to session"]
    assert errors[0].facts == ('Error: `directive //nolint:errcheck,gosec is unused for linter "errcheck"`',
                               "Fix: Removed `errcheck` from directive, kept only `gosec`",
                               "File: `strategy/session_state.go:85`")
    assert "Solution: Move validators to `checkpoint` package" in errors[1].facts
    assert "Root Cause:" not in errors[1].facts  # a bare label says nothing


def test_a_headed_file_is_one_observation_and_a_label_over_code_is_left_out() -> None:
    files = [o for o in recap_observations(SUMMARY) if o.files_modified]
    assert [o.files_modified for o in files] == [("checkpoint/validators.go",)]
    assert files[0].title.startswith("checkpoint/validators.go: Why: Created to break the import cycle")
    assert "Key Code:" not in files[0].facts
