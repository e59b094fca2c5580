import os
from pathlib import Path

import pytest

from fleet_rlm.workspace.paths import PathEscapeError, resolve_inside


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "files").mkdir(parents=True)
    (root / "files" / "data.csv").write_text("a,b\n")
    (tmp_path / "secret.txt").write_text("host secret")
    return root


def test_plain_relative_paths_resolve_inside_the_root(root: Path) -> None:
    assert resolve_inside(root, "files/data.csv") == root.resolve() / "files" / "data.csv"
    assert resolve_inside(root, "./files//data.csv") == root.resolve() / "files" / "data.csv"
    assert resolve_inside(root, "files/new/upload.txt") == root.resolve() / "files" / "new" / "upload.txt"


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("../secret.txt", "'..' component"),
        ("files/../../secret.txt", "'..' component"),
        ("files/..", "'..' component"),
        ("/etc/passwd", "absolute"),
        ("//etc/passwd", "absolute"),
        ("", "empty"),
        ("   ", "empty"),
        (".", "root itself"),
        ("./", "root itself"),
        ("files/data.csv\x00.txt", "NUL byte"),
        ("..\\secret.txt", "backslash"),
    ],
)
def test_unsafe_paths_are_refused_with_the_path_named(root: Path, rel: str, reason: str) -> None:
    with pytest.raises(PathEscapeError) as caught:
        resolve_inside(root, rel)
    assert reason in str(caught.value)
    assert repr(rel) in str(caught.value)
    assert caught.value.path == rel


def test_the_error_is_a_value_error(root: Path) -> None:
    with pytest.raises(ValueError, match=r"refused path '\.\./x'"):
        resolve_inside(root, "../x")


def test_a_non_string_is_refused(root: Path) -> None:
    with pytest.raises(PathEscapeError, match="expected a string, got PosixPath"):
        resolve_inside(root, Path("files/data.csv"))  # type: ignore[arg-type]


def test_symlink_to_a_file_outside_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "files" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(PathEscapeError, match=r"'files/leak\.txt'.*outside the workspace"):
        resolve_inside(root, "files/leak.txt")


def test_symlinked_directory_pointing_outside_is_refused_even_for_new_files(root: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (root / "files" / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PathEscapeError, match="outside the workspace"):
        resolve_inside(root, "files/out/upload.bin")


def test_absolute_symlink_to_a_file_inside_is_fine(root: Path) -> None:
    (root / "files" / "alias.csv").symlink_to(root / "files" / "data.csv")
    assert resolve_inside(root, "files/alias.csv") == (root / "files" / "data.csv").resolve()


def test_relative_symlink_with_dotdot_to_a_file_inside_is_fine(root: Path) -> None:
    (root / "artifacts").mkdir()
    (root / "artifacts" / "input.csv").symlink_to(Path("..") / "files" / "data.csv")
    assert resolve_inside(root, "artifacts/input.csv") == (root / "files" / "data.csv").resolve()


def test_symlink_to_the_root_itself_is_refused(root: Path) -> None:
    (root / "self").symlink_to(root)
    with pytest.raises(PathEscapeError, match="root itself"):
        resolve_inside(root, "self")


def test_symlink_loop_is_refused(root: Path) -> None:
    (root / "a").symlink_to(root / "b")
    (root / "b").symlink_to(root / "a")
    with pytest.raises(PathEscapeError, match="'a'"):
        resolve_inside(root, "a")


def test_root_given_through_a_symlink_still_works(root: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-ws"
    link.symlink_to(root)
    assert resolve_inside(link, "files/data.csv") == root.resolve() / "files" / "data.csv"
    with pytest.raises(PathEscapeError):
        resolve_inside(link, "../secret.txt")


def test_names_that_merely_start_with_dots_are_fine(root: Path) -> None:
    assert resolve_inside(root, "files/..hidden").name == "..hidden"
    assert resolve_inside(root, ".config/x").parts[-2:] == (".config", "x")
    assert os.fspath(resolve_inside(root, "files/a..b")).endswith("a..b")
