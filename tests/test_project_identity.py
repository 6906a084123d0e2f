from __future__ import annotations

import pickle
import subprocess
from pathlib import Path

import pytest

from memcairn.core.models import NewItem
from memcairn.core.project import ProjectIdentity, project_from_cwd


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_outside_git_the_directory_basename_is_the_project(tmp_path: Path) -> None:
    d = tmp_path / "plain-dir"
    d.mkdir()
    ident = project_from_cwd(d)
    assert ident.name == "plain-dir" and ident.chain == ("plain-dir",)


def test_inside_git_the_top_level_basename_is_the_project(tmp_path: Path) -> None:
    repo = tmp_path / "my-repo"
    (repo / "src" / "deep").mkdir(parents=True)
    _git("init", "-q", cwd=repo)
    assert project_from_cwd(repo / "src" / "deep").name == "my-repo"


def test_a_worktree_is_parent_slash_worktree_and_reads_the_parent(tmp_path: Path) -> None:
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("git not installed")
    repo = tmp_path / "main-repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    _git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "init", cwd=repo)
    _git("worktree", "add", "-q", str(tmp_path / "feature-x"), cwd=repo)
    ident = project_from_cwd(tmp_path / "feature-x")
    assert ident.name == "main-repo/feature-x"
    assert ident.chain == ("main-repo/feature-x", "main-repo")


def test_the_identity_is_an_immutable_value(tmp_path: Path) -> None:
    ident = ProjectIdentity("calc", ("calc",))
    assert ident == ProjectIdentity("calc", ("calc",)) and ident != ProjectIdentity("calc/x", ("calc/x", "calc"))
    assert ident != ("calc", ("calc",)) and hash(ident) == hash(ProjectIdentity("calc", ("calc",)))
    assert repr(ident) == "ProjectIdentity(name='calc', chain=('calc',))"
    assert pickle.loads(pickle.dumps(ident)) == ident
    with pytest.raises(AttributeError):
        ident.name = "other"
    d = tmp_path / "plain"
    d.mkdir()
    assert project_from_cwd(str(d)) == project_from_cwd(d) == ProjectIdentity("plain", ("plain",))


def test_a_relative_gitdir_and_the_filesystem_root(tmp_path: Path) -> None:
    main = tmp_path / "main-repo"
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text("gitdir: ../main-repo/.git/worktrees/wt\n")
    assert project_from_cwd(wt).chain == ("main-repo/wt", "main-repo")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / ".git").write_text("gitdir: ../main-repo/.git/modules/sub\n")  # a submodule is its own project
    assert project_from_cwd(sub).chain == ("sub",)
    if not Path("/.git").exists():
        assert project_from_cwd("/") == ProjectIdentity("root", ("root",))


def test_a_non_utf8_directory_name_becomes_a_name_the_store_takes(tmp_path: Path) -> None:
    from memcairn.core.models import NewItem
    from memcairn.store import Store

    ident = project_from_cwd(str(tmp_path / "caf\udce9"))
    assert ident.name == "caf\ufffd"
    with Store(tmp_path / "s.db") as store:
        assert store.add_item(NewItem(project=ident.name, kind="manual", title="x")).created


def test_a_deleted_working_directory_is_named_from_pwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tmp_path / "gone-dir"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.setenv("PWD", str(gone))
    assert project_from_cwd().name == "gone-dir"


def test_a_cwd_with_a_nul_from_a_malformed_event_does_not_raise() -> None:
    assert project_from_cwd("/tmp/a\x00b").name == "a\ufffdb"  # a name the store takes (no control character)


def test_control_characters_in_a_directory_name_become_a_name_the_store_takes(tmp_path: Path) -> None:
    from memcairn.store import Store

    odd = tmp_path / "web\napp\x7f\x85"
    odd.mkdir()
    name = project_from_cwd(str(odd)).name
    assert name == "web\ufffdapp\ufffd\ufffd"
    with Store(tmp_path / "s.db") as store:
        assert store.add_item(NewItem(project=name, kind="manual", text="kept")).created


def test_a_new_project_name_with_a_control_character_is_refused_clearly(tmp_path: Path) -> None:
    from memcairn.core.errors import ValidationError
    from memcairn.store import Store

    with Store(tmp_path / "s.db") as store:
        for bad in ("web\napp", "a\x00b", "tab\there", "c1\x9b"):
            with pytest.raises(ValidationError, match="control character"):
                store.add_item(NewItem(project=bad, kind="manual", text="lost?"))
        store.add_item(NewItem(project="fine", kind="manual", text="kept"))
        with pytest.raises(ValidationError, match="control character"):
            store.merge_project("fine", "new\nname")
        assert store.project_names() == ["fine"]
        # a name an earlier release stored keeps taking memories
        with store._conn:
            store._conn.execute("INSERT INTO projects(name, created_at_epoch) VALUES ('old\nname', 0)")
        assert store.add_item(NewItem(project="old\nname", kind="manual", text="still here")).created
