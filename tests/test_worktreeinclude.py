"""Carrying git-ignored files into experiment worktrees: real repositories, real `git worktree add`,
real files."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from repo_helpers import git, make_repo

from autoresearch_skills.worktreeinclude import (
    SNAPSHOT_FOLDER,
    Carried,
    carry,
    ignored,
    included,
    missing_path,
    patterns,
)

NANOGPT_GITIGNORE = "*.bin\n*.pkl\n*.pt\n__pycache__/\n.env\ncache/\n"


def nanogpt(root: Path) -> Path:
    """A repository shaped like nanoGPT after `python data/shakespeare_char/prepare.py`."""
    repo = make_repo(root, {".gitignore": NANOGPT_GITIGNORE, "train.py": "print('train')\n"})
    (repo / "data" / "shakespeare_char").mkdir(parents=True)
    (repo / "data" / "shakespeare_char" / "prepare.py").write_text("print('prepare')\n")
    git(repo, "add", "data")
    git(repo, "commit", "-q", "-m", "prepare script")
    (repo / "data" / "shakespeare_char" / "train.bin").write_bytes(b"\x01\x02" * 1000)
    (repo / "data" / "shakespeare_char" / "val.bin").write_bytes(b"\x03\x04" * 100)
    (repo / "data" / "shakespeare_char" / "meta.pkl").write_bytes(b"meta")
    (repo / "data" / "shakespeare_char" / "notes.txt").write_text("untracked, not ignored\n")
    (repo / ".env").write_text("WANDB_API_KEY=secret\n")
    (repo / "cache" / "hub").mkdir(parents=True)
    (repo / "cache" / "hub" / "blob").write_bytes(b"cached")
    return repo


def worktree(repo: Path, name: str = "wt") -> Path:
    path = repo.parent / name
    git(repo, "worktree", "add", "-q", "--detach", str(path), "HEAD")
    return path


def reflink_refusal(folder: Path) -> str | None:
    """Why `cp --reflink=always` cannot clone in `folder` (None when it can)."""
    src, dst = folder / ".reflink-probe", folder / ".reflink-probe-clone"
    src.write_bytes(b"x" * 4096)
    result = subprocess.run(["cp", "--reflink=always", str(src), str(dst)], capture_output=True, text=True)
    src.unlink()
    dst.unlink(missing_ok=True)
    return None if result.returncode == 0 else result.stderr.strip() or "cp --reflink=always failed"


def test_patterns_are_the_file_s_lines_less_comments_and_blanks_then_the_extra_ones(tmp_path):
    (tmp_path / ".worktreeinclude").write_text("# datasets\ndata/\n\n!data/raw/\n.env\r\n")
    assert patterns(tmp_path, ["tokenizer/"]) == ["data/", "!data/raw/", ".env", "tokenizer/"]
    assert patterns(tmp_path / "nowhere") == []


def test_only_files_both_matched_and_ignored_are_included(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    (repo / ".worktreeinclude").write_text("data/\n.env\n")
    assert included(repo) == [
        ".env",
        "data/shakespeare_char/meta.pkl",
        "data/shakespeare_char/train.bin",
        "data/shakespeare_char/val.bin",
    ]  # not prepare.py (tracked), notes.txt (not ignored), cache/hub/blob (ignored, not matched)
    assert "cache/hub/blob" in included(repo, ["cache/"])


def test_without_patterns_nothing_is_included(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    assert included(repo) == []


def test_globs_and_negation_work_as_in_gitignore(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    assert included(repo, ["*.bin", "!val.bin"]) == ["data/shakespeare_char/train.bin"]
    assert included(repo, ["data/**/*.pkl"]) == ["data/shakespeare_char/meta.pkl"]
    # as in gitignore, a file inside an excluded folder cannot be brought back by `!`
    assert "data/shakespeare_char/meta.pkl" in included(repo, ["data/", "!data/shakespeare_char/meta.pkl"])
    assert included(repo, ["data/*/*", "!data/shakespeare_char/meta.pkl"]) == [
        "data/shakespeare_char/train.bin",
        "data/shakespeare_char/val.bin",
    ]


def test_git_metadata_and_the_campaigns_folder_are_never_included(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    campaign = repo / "reports" / "auto_research" / "c1"
    campaign.mkdir(parents=True)
    (repo / "reports" / "auto_research" / ".gitignore").write_text("*\n")
    (campaign / "snapshot.bin").write_bytes(b"ours")
    git(repo, "worktree", "add", "-q", "--detach", str(campaign / "worktrees" / "wt-1"), "HEAD")
    found = included(repo, ["*"])
    assert not [p for p in found if p.startswith((".git/", "reports/"))]
    assert "data/shakespeare_char/train.bin" in found
    assert "reports/" not in ignored(repo)
    assert not [p for p in ignored(repo) if p.startswith("reports/")]


def test_ignored_lists_every_ignored_path_with_whole_folders_collapsed(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    (repo / "src" / "data").mkdir(parents=True)
    (repo / "src" / "data" / "z.txt").write_text("z")
    (repo / ".gitignore").write_text(NANOGPT_GITIGNORE + "src/data/\n")
    assert ignored(repo) == [
        ".env",
        "cache/",
        "data/shakespeare_char/meta.pkl",
        "data/shakespeare_char/train.bin",
        "data/shakespeare_char/val.bin",
        "src/",  # git names the outer folder too; the inner one is not listed twice
    ]


def test_a_carried_copy_edited_in_the_worktree_leaves_the_original_unchanged(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    carried = carry(repo, wt, [".env", "data/shakespeare_char/train.bin"], tmp_path / "campaign")
    assert [c.path for c in carried] == [".env", "data/shakespeare_char/train.bin"]
    assert {c.how for c in carried} <= {"copy", "reflink"}
    assert (wt / "data/shakespeare_char/train.bin").read_bytes() == b"\x01\x02" * 1000
    (wt / ".env").write_text("WANDB_API_KEY=changed by a run\n")
    with open(wt / "data/shakespeare_char/train.bin", "r+b") as f:
        f.write(b"\xff\xff")
    assert (repo / ".env").read_text() == "WANDB_API_KEY=secret\n"
    assert (repo / "data/shakespeare_char/train.bin").read_bytes() == b"\x01\x02" * 1000
    assert os.stat(repo / ".env").st_ino != os.stat(wt / ".env").st_ino


def test_carried_files_stay_out_of_git_in_the_worktree(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    (repo / ".worktreeinclude").write_text("data/\n.env\n")
    carry(repo, wt, included(repo), tmp_path / "campaign")
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(repo, "status", "--porcelain", "--untracked-files=all").splitlines() == [
        "?? .worktreeinclude",
        "?? data/shakespeare_char/notes.txt",
    ]


def test_carry_into_a_fresh_worktree_makes_real_folders_for_new_files_to_land_in(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    carry(repo, wt, included(repo, ["cache/"]), tmp_path / "campaign")
    assert (wt / "cache" / "hub").is_dir() and not (wt / "cache").is_symlink()
    (wt / "cache" / "hub" / "written-by-run").write_text("new")
    assert not (repo / "cache" / "hub" / "written-by-run").exists()


def test_a_folder_given_to_carry_is_carried_file_by_file(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    carried = carry(repo, wt, ["cache"], tmp_path / "campaign")
    assert [c.path for c in carried] == ["cache/hub/blob"]


def test_a_big_file_is_a_hard_link_to_a_read_only_snapshot_never_to_the_original(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    if reflink_refusal(tmp_path) is None:
        pytest.skip("this filesystem clones files (reflink), which carry prefers to a snapshot link")
    wt1, wt2 = worktree(repo, "wt1"), worktree(repo, "wt2")
    campaign = tmp_path / "campaign"
    path = "data/shakespeare_char/train.bin"
    mode_before = os.stat(repo / path).st_mode
    assert carry(repo, wt1, [path], campaign, copy_limit_mb=0) == [Carried(path, "link")]
    assert carry(repo, wt2, [path], campaign, copy_limit_mb=0) == [Carried(path, "link")]
    snapshot = campaign / SNAPSHOT_FOLDER / path
    original, one, two = os.stat(repo / path), os.stat(wt1 / path), os.stat(wt2 / path)
    assert one.st_ino == two.st_ino == os.stat(snapshot).st_ino  # one copy shared by both worktrees
    assert original.st_ino != one.st_ino and original.st_nlink == 1
    assert stat.S_IMODE(one.st_mode) == 0o444
    assert original.st_mode == mode_before
    assert (wt1 / path).read_bytes() == (repo / path).read_bytes()


@pytest.fixture
def open_tmp():
    """A folder every user may enter, for a child process that runs without root."""
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_run_cannot_write_through_the_snapshot_link(open_tmp):
    repo = nanogpt(open_tmp / "repo")
    if reflink_refusal(open_tmp) is None:
        pytest.skip("this filesystem clones files (reflink), which carry prefers to a snapshot link")
    wt = worktree(repo)
    path = "data/shakespeare_char/train.bin"
    carry(repo, wt, [path], open_tmp / "campaign", copy_limit_mb=0)
    if os.geteuid() != 0:
        with pytest.raises(PermissionError), open(wt / path, "r+b"):
            pass
        return
    # Root ignores file modes: check as a user who owns the file, so only its mode can refuse.
    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no `nobody` user to run the write as")
    if any(not os.stat(p).st_mode & stat.S_IXOTH for p in [*open_tmp.parents]):
        pytest.skip(f"{open_tmp.parent} cannot be entered by other users")
    os.chown(wt / path, nobody, -1)
    writable = wt / "writable.bin"
    writable.write_bytes(b"x")
    os.chown(writable, nobody, -1)

    def append(file: Path) -> subprocess.CompletedProcess:
        script = 'printf x >> "$1"'
        return subprocess.run(
            ["sh", "-c", script, "sh", str(file)], user=nobody, capture_output=True, text=True
        )

    assert append(writable).returncode == 0  # the same user may write a file of mode 0644
    refused = append(wt / path)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert (repo / path).read_bytes() == b"\x01\x02" * 1000


@pytest.mark.skipif(shutil.which("cp") is None, reason="no cp to probe the filesystem")
def test_a_filesystem_that_clones_files_gets_reflinks(tmp_path):
    refusal = reflink_refusal(tmp_path)
    if refusal is not None:
        pytest.skip(f"{tmp_path} cannot reflink: {refusal}")
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    path = "data/shakespeare_char/train.bin"
    assert carry(repo, wt, [path], tmp_path / "campaign", copy_limit_mb=0) == [Carried(path, "reflink")]
    assert not (tmp_path / "campaign" / SNAPSHOT_FOLDER).exists()


def test_symlinked_dataset_folders_are_carried_as_the_same_symlinks(tmp_path):
    datasets = tmp_path / "datasets" / "openwebtext"
    datasets.mkdir(parents=True)
    (datasets / "train.bin").write_bytes(b"owt")
    repo = make_repo(tmp_path / "repo", {".gitignore": "data/\n"})
    (repo / "data" / "v2").mkdir(parents=True)
    (repo / "data" / "v2" / "train.bin").write_bytes(b"v2")
    os.symlink(datasets, repo / "data" / "owt")  # absolute
    os.symlink("v2", repo / "data" / "latest")  # relative, inside the repository
    os.symlink("../../datasets/openwebtext", repo / "data" / "shared")  # relative, leaving it
    (repo / ".worktreeinclude").write_text("data/\n")
    paths = included(repo)
    assert paths == ["data/latest", "data/owt", "data/shared", "data/v2/train.bin"]
    wt = worktree(repo, "elsewhere-wt")
    carried = carry(repo, wt, paths, tmp_path / "campaign")
    assert {c.path: c.how for c in carried}["data/owt"] == "symlink"
    assert os.readlink(wt / "data" / "owt") == str(datasets)
    assert os.readlink(wt / "data" / "latest") == "v2"
    assert os.readlink(wt / "data" / "shared") == str(datasets)  # kept relative it would dangle here
    assert (wt / "data" / "shared" / "train.bin").read_bytes() == b"owt"
    assert (wt / "data" / "latest" / "train.bin").read_bytes() == b"v2"


def test_carrying_again_leaves_unchanged_paths_alone_and_replaces_stale_ones(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    os.symlink("/srv/datasets/owt", repo / "cache" / "owt")
    wt = worktree(repo)
    paths = [".env", "data/shakespeare_char/train.bin", "cache/owt"]
    campaign = tmp_path / "campaign"
    assert len(carry(repo, wt, paths, campaign)) == 3
    inode = os.stat(wt / ".env").st_ino
    assert carry(repo, wt, paths, campaign) == []
    assert os.stat(wt / ".env").st_ino == inode
    (repo / ".env").write_text("WANDB_API_KEY=rotated, longer\n")
    os.unlink(repo / "cache" / "owt")
    os.symlink("/srv/datasets/owt-v2", repo / "cache" / "owt")
    (wt / "data/shakespeare_char/train.bin").write_bytes(b"truncated by a run")
    killed = subprocess.Popen(["true"])
    killed.wait()
    (wt / f".carrying-{killed.pid}-.env").write_text("WANDB_API_KEY=half wri")  # a carry killed midway
    again = carry(repo, wt, paths, campaign)
    assert [c.path for c in again] == paths
    assert (wt / ".env").read_text() == "WANDB_API_KEY=rotated, longer\n"
    assert os.readlink(wt / "cache" / "owt") == "/srv/datasets/owt-v2"
    assert (wt / "data/shakespeare_char/train.bin").read_bytes() == b"\x01\x02" * 1000
    assert not list(wt.rglob(".carrying-*"))


def test_a_stale_snapshot_is_made_again_when_the_original_changes(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    if reflink_refusal(tmp_path) is None:
        pytest.skip("this filesystem clones files (reflink), which carry prefers to a snapshot link")
    wt = worktree(repo)
    path = "data/shakespeare_char/train.bin"
    carry(repo, wt, [path], tmp_path / "campaign", copy_limit_mb=0)
    (repo / path).write_bytes(b"re-tokenized")
    assert carry(repo, wt, [path], tmp_path / "campaign", copy_limit_mb=0) == [Carried(path, "link")]
    assert (wt / path).read_bytes() == b"re-tokenized"


def test_a_file_the_worktree_branch_tracks_is_left_to_the_branch(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    (wt / "data/shakespeare_char/meta.pkl").write_bytes(b"the branch's own")
    git(wt, "add", "--force", "data/shakespeare_char/meta.pkl")
    git(wt, "commit", "-q", "-m", "track meta")
    assert carry(repo, wt, ["data/shakespeare_char/meta.pkl"], tmp_path / "campaign") == []
    assert (wt / "data/shakespeare_char/meta.pkl").read_bytes() == b"the branch's own"


def test_carry_never_writes_through_a_symlinked_folder_of_the_worktree(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    outside = tmp_path / "users-own-folder"
    outside.mkdir()
    os.symlink(outside, wt / "cache")
    with pytest.raises(Exception, match="leads out of the worktree"):
        carry(repo, wt, ["cache/hub/blob"], tmp_path / "campaign")
    assert list(outside.iterdir()) == []


def test_paths_outside_the_repository_are_refused(tmp_path):
    repo = nanogpt(tmp_path / "repo")
    wt = worktree(repo)
    for bad in ["../secrets", "/etc/passwd", ".git/config"]:
        with pytest.raises(Exception, match="cannot carry"):
            carry(repo, wt, [bad], tmp_path / "campaign")


NANOGPT_CRASH = """\
Overriding: dataset = shakespeare_char
tokens per iteration will be: 16,384
found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)
Initializing a new model from scratch
number of parameters: 10.65M
Traceback (most recent call last):
  File "{wt}/train.py", line 264, in <module>
    X, Y = get_batch('train') # fetch the very first batch
           ^^^^^^^^^^^^^^^^^^
  File "{wt}/train.py", line 116, in get_batch
    data = np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3/dist-packages/numpy/core/memmap.py", line 229, in __new__
    f_ctx = open(
            ^^^^^
FileNotFoundError: [Errno 2] No such file or directory: 'data/shakespeare_char/train.bin'
"""

TORCH_CRASH = """\
Traceback (most recent call last):
  File "{wt}/finetune.py", line 40, in <module>
    state = torch.load(ckpt_path, map_location="cpu")
  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1319, in load
    with _open_file_like(f, "rb") as opened_file:
  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 659, in _open_file_like
    return _open_file(name_or_buffer, mode)
  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 640, in __init__
    super().__init__(open(name, mode))
FileNotFoundError: [Errno 2] No such file or directory: '{wt}/out/base/ckpt.pt'
"""

HF_TOKENIZER_CRASH = """\
Traceback (most recent call last):
  File "{wt}/sft.py", line 12, in <module>
    tok = AutoTokenizer.from_pretrained("tokenizer")
  File "/opt/venv/lib/python3.11/site-packages/transformers/tokenization_utils_base.py", line 2016, in from_pretrained
    raise EnvironmentError(
OSError: Can't load tokenizer for 'tokenizer'. If you were trying to load it from 'https://huggingface.co/models', \
make sure you don't have a local directory with the same name. Otherwise, make sure 'tokenizer' is the correct path \
to a directory containing all relevant files for a GPT2TokenizerFast tokenizer.
"""

HF_CONFIG_CRASH = """\
  File "/opt/venv/lib/python3.11/site-packages/transformers/utils/hub.py", line 456, in cached_file
    raise EnvironmentError(
OSError: out/sft does not appear to have a file named config.json. Checkout 'https://huggingface.co/out/sft/tree/None' \
for available files.
"""


def crash_repo(tmp_path: Path) -> tuple[Path, Path]:
    repo = nanogpt(tmp_path / "repo")
    (repo / ".gitignore").write_text(NANOGPT_GITIGNORE + "out/\ntokenizer/\n")
    git(repo, "commit", "-q", "-am", "ignore outputs")
    for name, data in {
        "out/base/ckpt.pt": b"w",
        "out/sft/config.json": b"{}",
        "tokenizer/vocab.json": b"{}",
    }.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    return repo, worktree(repo)


def test_missing_path_reads_nanogpt_s_crash_in_a_fresh_worktree(tmp_path):
    repo, wt = crash_repo(tmp_path)
    log = NANOGPT_CRASH.format(wt=wt)
    assert missing_path(log, wt, repo) == (
        "data/shakespeare_char/train.bin",
        "data/shakespeare_char/train.bin",
    )


def test_missing_path_takes_an_absolute_path_inside_the_workdir_and_names_its_ignored_folder(tmp_path):
    repo, wt = crash_repo(tmp_path)
    assert missing_path(TORCH_CRASH.format(wt=wt), wt, repo) == ("out/base/ckpt.pt", "out/")


def test_missing_path_reads_hugging_face_errors(tmp_path):
    repo, wt = crash_repo(tmp_path)
    assert missing_path(HF_TOKENIZER_CRASH.format(wt=wt), wt, repo) == ("tokenizer", "tokenizer/")
    assert missing_path(HF_CONFIG_CRASH, wt, repo) == ("out/sft/config.json", "out/")


@pytest.mark.parametrize(
    "log",
    [
        "cat: .env: No such file or directory",
        "bash: line 1: .env: No such file or directory",
        "OSError: .env does not exist",
        "FileNotFoundError: [Errno 2] No such file or directory: './.env'",
        'OSError: Not found: ".env": No such file or directory Error #2',
        "RuntimeError: open file failed because of errno 2 on fopen: No such file or directory, file path: .env",
    ],
)
def test_missing_path_reads_shell_c_and_library_forms(tmp_path, log):
    repo, wt = crash_repo(tmp_path)
    assert missing_path(log, wt, repo) == (".env", ".env")


def test_missing_path_names_a_symlinked_dataset_folder_without_a_slash(tmp_path):
    repo, wt = crash_repo(tmp_path)
    (tmp_path / "owt").mkdir()
    (tmp_path / "owt" / "train.bin").write_bytes(b"owt")
    os.symlink(tmp_path / "owt", repo / "openwebtext")
    with open(repo / ".git" / "info" / "exclude", "a") as f:
        f.write("openwebtext\n")
    log = "FileNotFoundError: [Errno 2] No such file or directory: 'openwebtext/train.bin'"
    assert missing_path(log, wt, repo) == ("openwebtext/train.bin", "openwebtext")
    assert included(repo, ["openwebtext"]) == ["openwebtext"]


def test_missing_path_returns_the_first_path_the_checkout_holds_ignored(tmp_path):
    repo, wt = crash_repo(tmp_path)
    log = (
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/never/made.bin'\n"
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/shakespeare_char/val.bin'\n"
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/shakespeare_char/train.bin'\n"
    )
    assert missing_path(log, wt, repo) == ("data/shakespeare_char/val.bin", "data/shakespeare_char/val.bin")


@pytest.mark.parametrize(
    "log",
    [
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/never/made.bin'",  # not in the checkout
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/shakespeare_char/notes.txt'",  # not ignored
        "FileNotFoundError: [Errno 2] No such file or directory: 'train.py'",  # tracked, and there
        "FileNotFoundError: [Errno 2] No such file or directory: '/usr/share/dict/words'",  # outside the workdir
        "FileNotFoundError: [Errno 2] No such file or directory: '../repo/.env'",  # outside the workdir
        "step 100: train loss 1.2345, val loss 1.4567",
        "",
    ],
)
def test_missing_path_is_none_when_carrying_would_not_help(tmp_path, log):
    repo, wt = crash_repo(tmp_path)
    assert missing_path(log, wt, repo) is None


def test_missing_path_is_none_for_a_path_the_worktree_already_has(tmp_path):
    repo, wt = crash_repo(tmp_path)
    carry(repo, wt, [".env"], tmp_path / "campaign")
    assert missing_path("cat: .env: No such file or directory", wt, repo) is None


def test_the_suggested_line_carries_the_path_it_names(tmp_path):
    repo, wt = crash_repo(tmp_path)
    path, line = missing_path(TORCH_CRASH.format(wt=wt), wt, repo)
    assert path in included(repo, [line])
    carry(repo, wt, included(repo, [line]), tmp_path / "campaign")
    assert missing_path(TORCH_CRASH.format(wt=wt), wt, repo) is None
