"""Sandbox bootstrap, run as ``python -I _sandbox_boot.py CONFIG.json`` by ``LocalSubprocessSandbox``.

It starts as a fresh single-threaded process, so it can safely unshare namespaces, change mounts and
drop privileges before it runs the untrusted code in-process. Stdlib only; it never imports the
package. Process tree in ``namespaces`` mode::

    boot (host pid ns)  ->  init (pid 1 of a new pid ns; reaps, dies with boot)  ->  worker (user code)

When init exits the kernel kills every process left in the namespace, so nothing the code started
(a fork bomb, a daemon that called setsid) survives the run.
"""

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # x86_64 and aarch64 share the numbers of syscalls added after 5.1
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
CAP_VERSION_3 = 0x20080522
PRIVATE_MOUNT_POINT = "/tmp/sandbox"
WRITABLE_TMPFS = ("/tmp", "/var/tmp", "/dev/shm")

libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def set_readonly(path, readonly, recursive=True):
    attr = MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr)),
          f"mount_setattr {path}")


def write_file(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def blocked_ancestor(path):
    """The topmost ancestor of ``path`` that other users cannot traverse (None if all can)."""
    parts = os.path.realpath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        ancestor = os.sep.join(parts[:i]) or os.sep
        try:
            if not os.stat(ancestor).st_mode & 0o001:
                return ancestor
        except OSError:
            return None
    return None


def expose_interpreter():
    """Make the interpreter readable by the run's uid when it lives in a private home (e.g. pyenv
    under /root): hide the private ancestor behind an empty tmpfs and bind back only the Python
    directories. The rest of that home (tokens, keys) stays invisible to the code."""
    needed = {os.path.realpath(p) for p in (*sys.path, sys.prefix, sys.base_prefix,
                                             os.path.dirname(os.path.realpath(sys.executable))) if p}
    by_ancestor = {}
    for path in sorted(needed):
        if os.path.isdir(path):
            ancestor = blocked_ancestor(path)
            if ancestor is not None:
                by_ancestor.setdefault(ancestor, []).append(path)
    for ancestor, paths in by_ancestor.items():
        paths = [p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths)]
        fds = {p: os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in paths}
        mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for path, fd in fds.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            os.close(fd)


def enter_namespaces(cfg):
    """New user (when not root), mount, network, ipc and pid namespaces; private writable dirs."""
    if os.geteuid() != 0:
        uid, gid = os.geteuid(), os.getegid()
        check(libc.unshare(CLONE_NEWUSER), "unshare user namespace")
        write_file("/proc/self/setgroups", "deny")
        write_file("/proc/self/uid_map", f"{uid} {uid} 1")
        write_file("/proc/self/gid_map", f"{gid} {gid} 1")
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID), "unshare namespaces")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if os.geteuid() == 0 and cfg.get("uid") is not None:
        expose_interpreter()
    workdir_fd = os.open(cfg["workdir"], os.O_RDONLY | os.O_DIRECTORY)
    tmpfs_opts = f"size={int(cfg['tmpfs_mb'])}m,mode=1777"
    for path in WRITABLE_TMPFS:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts)
    os.makedirs(PRIVATE_MOUNT_POINT, exist_ok=True)
    mount(f"/proc/self/fd/{workdir_fd}", PRIVATE_MOUNT_POINT, None, MS_BIND)
    os.close(workdir_fd)
    readonly = True
    try:
        set_readonly("/", True)
        for path in (*WRITABLE_TMPFS, "/dev"):
            if os.path.isdir(path) and os.path.ismount(path):
                set_readonly(path, False, recursive=path != "/dev")
        set_readonly(PRIVATE_MOUNT_POINT, False)
    except OSError:
        readonly = False  # kernel without mount_setattr: fall back to file permissions
    return readonly


def drop_privileges(cfg):
    if os.geteuid() == 0 and cfg.get("uid") is not None:
        # a run-unique uid: nothing on disk belongs to it, and RLIMIT_NPROC counts only this run
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    else:
        header, data = CapHeader(CAP_VERSION_3, 0), (CapData * 2)()
        libc.capset(ctypes.byref(header), data)  # no capabilities left inside the user namespace
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def apply_limits(cfg):
    def limit(which, soft, hard=None):
        resource.setrlimit(which, (soft, soft if hard is None else hard))

    cpu = max(1, int(cfg["cpu_time_s"] + 0.999))
    limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    limit(resource.RLIMIT_AS, int(cfg["memory_mb"]) << 20)
    limit(resource.RLIMIT_FSIZE, int(cfg["max_file_mb"]) << 20)
    limit(resource.RLIMIT_NOFILE, int(cfg["max_open_files"]))
    limit(resource.RLIMIT_NPROC, int(cfg["nproc"]))
    limit(resource.RLIMIT_CORE, 0)


def install_guard(cfg):
    """``rlimits`` mode only: an audit hook refusing sockets, process spawning, ctypes and writes
    outside the sandbox directory. In-process and best effort (SPEC: documented, not a kernel wall)."""
    workdir = os.path.realpath(cfg["workdir"]) + os.sep
    denied_prefixes = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
                       "ctypes.", "os.fork", "pty.")

    def hook(event, args):
        if event.startswith(denied_prefixes) and event not in ("socket.getaddrinfo", "socket.gethostname"):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in ("os.kill", "os.killpg") and args and args[0] not in (0, os.getpid()):
            raise PermissionError(f"sandbox: {event} outside the sandbox is not allowed")
        if event == "open" and len(args) >= 2:
            path, mode = args[0], args[1]
            writing = isinstance(mode, str) and any(c in mode for c in "wax+")
            if isinstance(mode, int):
                writing = bool(mode & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
            if writing and isinstance(path, (str, bytes)):
                real = os.path.realpath(os.fsdecode(path))
                if not (real + os.sep).startswith(workdir) and real not in ("/dev/null",):
                    raise PermissionError(f"sandbox: writing {real} is outside the sandbox directory")
        if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.symlink", "os.link",
                     "shutil.rmtree", "os.truncate"):
            path = args[0] if args else None
            if isinstance(path, (str, bytes)):
                real = os.path.realpath(os.fsdecode(path))
                if not (real + os.sep).startswith(workdir):
                    raise PermissionError(f"sandbox: {event} on {real} is outside the sandbox directory")

    sys.addaudithook(hook)


def run_user_code(cfg, workdir):
    os.chdir(workdir)
    code = cfg["code"]
    main_path = os.path.join(workdir, cfg["main_name"])
    sys.argv = [main_path]
    sys.path[0:0] = [workdir]
    apply_limits(cfg)
    if cfg["mode"] == "rlimits":
        install_guard(cfg)
    namespace = {"__name__": "__main__", "__file__": main_path, "__builtins__": __builtins__}
    try:
        exec(compile(code, main_path, "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        traceback.print_exception(type(exc), exc, tb)
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.exit(0)


def wait_status(pid):
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal:{os.WTERMSIG(status)}"
    return f"exit:{os.WEXITSTATUS(status)}"


def mirror(outcome):
    kind, value = outcome.split(":")
    if kind == "signal":
        signal.signal(int(value), signal.SIG_DFL)
        os.kill(os.getpid(), int(value))
    os._exit(int(value))


def init_process(cfg, status_fd):
    """PID 1 of the sandbox: runs the worker, reports its status, and takes the namespace down with it."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    with contextlib.suppress(OSError):  # else keep the host's /proc view (read-only)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)
    worker = os.fork()
    if worker == 0:
        drop_privileges(cfg)
        run_user_code(cfg, PRIVATE_MOUNT_POINT)
    outcome = None
    while True:  # reap every orphan; stop when the worker itself is gone
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == worker:
            outcome = (f"signal:{os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                       else f"exit:{os.WEXITSTATUS(status)}")
            break
    os.write(status_fd, (outcome or "exit:1").encode())
    os._exit(0)


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        cfg = json.load(handle)
    with open(cfg["code_path"], encoding="utf-8") as handle:
        cfg["code"] = handle.read()  # read now: the worker may no longer be allowed to
    if cfg["mode"] == "rlimits":
        if os.geteuid() == 0 and cfg.get("uid") is not None:
            drop_privileges(cfg)
        run_user_code(cfg, cfg["workdir"])
    try:
        readonly = enter_namespaces(cfg)
    except OSError as exc:
        print(f"sandbox setup failed: {exc}", file=sys.stderr)
        os._exit(125)
    if cfg.get("probe"):
        print(json.dumps({"readonly_root": readonly}), flush=True)
        os._exit(0)
    read_fd, write_fd = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read_fd)
        init_process(cfg, write_fd)
    os.close(write_fd)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(init, signal.SIGKILL))
    wait_status(init)
    outcome = os.read(read_fd, 64).decode() or "signal:9"
    mirror(outcome)


if __name__ == "__main__":
    main()
