"""Index files are private to their owner: the state dir 0700, index files 0600, whatever the umask.

An agent's index holds the text of its memory, so other local users must not read it. New files are
created with these modes (SQLite gives ``-wal``/``-shm`` the mode of the database file); files left
looser by an older version or by hand are listed by :func:`loose_files` (``status`` warns) and
tightened by :func:`tighten` (``index`` does it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_SIDECARS = ("", "-wal", "-shm", "-journal")


def create_private_file(path: str) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (SQLite takes an empty file as a new database)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))


def index_paths(db_path: str, *, state_dir_owned: bool) -> list[str]:
    """Every existing path of the index of ``db_path``: the file and its sidecars, the reindex lock,
    temp/backup/set-aside copies, vector files an earlier version left (folder and files) and, when
    ``state_dir_owned`` (the folder is the state dir, not a ``store.path`` folder that may hold
    other things), the folder itself."""
    db_path = os.path.abspath(db_path)
    out: list[str] = []
    if state_dir_owned and _own_folder(os.path.dirname(db_path)):
        out.append(os.path.dirname(db_path))
    base = glob.escape(db_path)
    names = {db_path + s for s in _SIDECARS} | {db_path + ".reindex.lock"}
    for pattern in (".tmp-*", ".backup-*", ".corrupt-*", ".newer-*"):
        names.update(glob.glob(base + pattern))
    out.extend(name for name in sorted(names) if os.path.isfile(name) and not os.path.islink(name))
    vectors = db_path + "-vectors"
    if os.path.isdir(vectors) and not os.path.islink(vectors):
        out.append(vectors)
        with contextlib.suppress(OSError):
            out.extend(sorted(e.path for e in os.scandir(vectors) if e.is_file(follow_symlinks=False)))
    return out


def _own_folder(folder: str) -> bool:
    """Whether ``folder`` may be made private: a folder of this user that is not shared (a sticky,
    world-writable folder such as /tmp) and not the home folder itself."""
    try:
        st = os.stat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & stat.S_ISVTX:
        return False
    return os.path.realpath(folder) != os.path.realpath(os.path.expanduser("~"))


def loose_files(db_path: str, *, state_dir_owned: bool) -> list[dict[str, str]]:
    """The index paths other users may access (any group/other bit): ``[{"path", "mode"}]``, mode in octal."""
    out = []
    for path in index_paths(db_path, state_dir_owned=state_dir_owned):
        try:
            mode = os.stat(path).st_mode & 0o777
        except OSError:
            continue
        if mode & 0o077:
            out.append({"path": path, "mode": f"{mode:04o}"})
    return out


def tighten(db_path: str, *, state_dir_owned: bool) -> list[str]:
    """Remove the group/other bits of every loose index path; the paths changed (ones it may not
    change, e.g. owned by another user, are left for ``status`` to report)."""
    fixed = []
    for item in loose_files(db_path, state_dir_owned=state_dir_owned):
        with contextlib.suppress(OSError):
            os.chmod(item["path"], int(item["mode"], 8) & 0o700)
            fixed.append(item["path"])
    return fixed
