package supervisor

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Support reports why Command cannot run programs on this system,
// or nil. Linux has everything it needs.
func Support() error { return nil }

// childAttr starts the program in its own process group, and has the
// kernel SIGKILL it when the thread that started it (see Work) exits, even
// when this process is SIGKILLed.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killPID(pid int, sig syscall.Signal) { _ = syscall.Kill(pid, sig) }

func readProcs() map[int]proc {
	out := map[int]proc{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out[pid] = p
		}
	}
	return out
}

// readProc reads /proc/PID/stat; false when the process is gone.
func readProc(pid int) (proc, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	return parseStat(pid, stat)
}

// parseStat reads what proc needs from the text of /proc/PID/stat.
func parseStat(pid int, stat []byte) (proc, bool) {
	// pid (comm) state ppid pgrp ... starttime (the 20th field after
	// comm); comm may contain spaces and parens.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return proc{}, false
	}
	p := proc{pid: pid}
	field := 0
	for j := i + 1; j < len(stat) && field <= 19; {
		for j < len(stat) && stat[j] == ' ' {
			j++
		}
		k := j
		for k < len(stat) && stat[k] != ' ' && stat[k] != '\n' {
			k++
		}
		if k == j {
			break
		}
		f := stat[j:k]
		switch field {
		case 0:
			p.zombie = f[0] == 'Z' || f[0] == 'X'
		case 1:
			p.ppid = int(atou(f))
		case 2:
			p.pgrp = int(atou(f))
		case 19:
			p.start = atou(f)
		}
		field++
		j = k
	}
	return p, field > 19
}

// atou parses a decimal number without allocating; 0 for anything else.
func atou(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

// startTime is pid's start time in clock ticks after boot, or 0.
func startTime(pid int) uint64 {
	p, _ := readProc(pid)
	return p.start
}

// hasEnv reports whether process pid's initial environment contains kv.
// Processes of other users are unreadable unless this process is root.
func hasEnv(pid int, kv []byte) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, v := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(v, kv) {
			return true
		}
	}
	return false
}

// members returns the live (not zombie) processes of the tree: the
// program's process group, processes that carry its id, and, as a
// subreaper, every descendant of this process. Never this process.
//
// As a subreaper the descendants are the whole tree (an orphan is
// reparented to the nearest subreaper among its ancestors, which is this
// process or one of its descendants), and they are found by walking the
// children lists of /proc, which costs little. Otherwise every process of
// the system is looked at.
func (t *programTree) members() []proc {
	if !t.descendants {
		return scanTrees([]*programTree{t})[0]
	}
	if all, ok := liveDescendants(os.Getpid()); ok {
		return t.own(all)
	}
	self := os.Getpid()
	procs := readProcs()
	kv := []byte(programIDVar + "=" + t.id)
	var out []proc
	for pid, p := range procs {
		if pid == self || p.zombie {
			continue
		}
		// Only processes started with or after the program can carry its id.
		if isHelper(pid) {
			continue
		}
		if p.pgrp == t.pid || descends(procs, pid, self) || (p.start >= t.start && hasEnv(pid, kv)) {
			out = append(out, p)
		}
	}
	return out
}

// own picks the tree's members from this subreaper's descendants. With one
// program, every descendant but the helpers is the program's. With several
// (a group run), a descendant belongs to the program under which it runs,
// or, when its program has exited and it was reparented here, to the
// program whose id it carries; one that carries no program's id at all
// cannot be told apart and counts as every program's, so that it never
// outlives the lease it may belong to.
func (t *programTree) own(all []descendant) []proc {
	owned.mu.Lock()
	others := 0
	roots := make(map[int]bool, len(owned.pids))
	for pid := range owned.pids {
		if !owned.helpers[pid] {
			roots[pid] = true
			if pid != t.pid {
				others++
			}
		}
	}
	owned.mu.Unlock()
	kv := []byte(programIDVar + "=" + t.id)
	var out []proc
	for _, d := range all {
		switch {
		case isHelper(d.pid) || isHelper(d.top):
		case others == 0 || d.top == t.pid:
			out = append(out, d.proc)
		case roots[d.top]:
			// Another program's.
		case hasEnv(d.pid, kv) || !hasEnvPrefix(d.pid, []byte(programIDVar+"=")):
			out = append(out, d.proc)
		}
	}
	return out
}

// hasEnvPrefix reports whether process pid's initial environment has a
// variable that begins with prefix.
func hasEnvPrefix(pid int, prefix []byte) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, v := range bytes.Split(env, []byte{0}) {
		if bytes.HasPrefix(v, prefix) {
			return true
		}
	}
	return false
}

// descendant is a live descendant of this process, with top, the child of
// this process under which it runs (itself for a child).
type descendant struct {
	proc
	top int
}

// liveDescendants returns the descendants of root that are not zombies,
// from the children lists of /proc/PID/task/TID/children; false when the
// kernel does not provide them.
func liveDescendants(root int) ([]descendant, bool) {
	var out []descendant
	type node struct{ pid, top int }
	queue := []node{{root, 0}}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		kids, ok := children(n.pid)
		if !ok && n.pid == root {
			return nil, false
		}
		for _, k := range kids {
			if seen[k] {
				continue
			}
			seen[k] = true
			top := n.top
			if n.pid == root {
				top = k
			}
			queue = append(queue, node{k, top})
			if p, ok := readProc(k); ok && !p.zombie {
				out = append(out, descendant{p, top})
			}
		}
	}
	return out, true
}

// children lists the children of pid, from every one of its threads.
func children(pid int) ([]int, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	var out []int
	for _, task := range tasks {
		data, err := os.ReadFile(dir + "/" + task.Name() + "/children")
		if err != nil {
			return nil, false
		}
		for _, f := range bytes.Fields(data) {
			if k, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, k)
			}
		}
	}
	return out, true
}

func isZombie(pid int) bool {
	p, ok := readProc(pid)
	return !ok || p.zombie // gone, or a zombie
}

// subreaper is whether this process became a child subreaper.
var subreaper struct {
	once sync.Once
	ok   bool
}

// becomeSubreaper makes this process a child subreaper, once, and reports
// whether it is one.
func becomeSubreaper(log *slog.Logger) bool {
	subreaper.once.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Warn("cannot become a child subreaper; descendants that leave the program's tree and clear their environment will not be found", "err", err.Error())
			return
		}
		subreaper.ok = true
	})
	return subreaper.ok
}

// reapOrphans reaps, whenever a child exits, this process's zombie children
// other than the programs os/exec waits for: orphans of the program's tree
// that were reparented to this subreaper. It returns a function that stops
// it after a last sweep.
func reapOrphans(int) (stop func()) {
	return reapZombies()
}

// ReapAsInit reaps, until stop is called, every zombie child of this
// process other than the programs Command runs, when this process is PID 1
// of its PID namespace: a container's entrypoint, to which every orphan in
// the container is reparented (a process that a `docker exec` or `kubectl
// exec` session left behind, for one), whether or not a program runs. It
// does nothing for any other process (a subreaper's orphans come from its
// program's tree, which Command reaps), nor on other systems. Call it only
// in a process that starts no other programs, as `leasectl run` does.
func ReapAsInit() (stop func()) {
	if os.Getpid() != 1 {
		return func() {}
	}
	return reapZombies()
}

// reapZombies sweeps this process's zombie children, other than owned
// ones, at every SIGCHLD, until stop, which sweeps a last time.
func reapZombies() (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	quit, done := make(chan struct{}), make(chan struct{})
	sweep := func() {
		owned.mu.Lock()
		defer owned.mu.Unlock()
		kids, _ := children(os.Getpid())
		for _, pid := range kids {
			if !owned.pids[pid] && isZombie(pid) {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
		}
	}
	go func() {
		defer close(done)
		sweep() // orphans that exited before this began
		for {
			select {
			case <-sigs:
				sweep()
			case <-quit:
				sweep()
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(quit)
		<-done
	}
}

// obituarySupport: Linux runs obituaries.
func obituarySupport() error { return nil }

// obituaryAttr starts the obituary in its own process group and without
// Pdeathsig: it must outlive this process, and a Ctrl-C to the terminal's
// group stops this process (which says goodbye), not the obituary.
func obituaryAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// membersOf returns the live members of each of trees, as members does for
// one, from one walk of /proc: the obituary stops every program of a group
// at once, and a walk per program and round cost it tens of milliseconds
// per role while new leaders waited for it.
func membersOf(trees []*programTree) [][]proc {
	for _, t := range trees {
		if t.descendants {
			out := make([][]proc, len(trees))
			for i, t := range trees {
				out[i] = t.members()
			}
			return out
		}
	}
	return scanTrees(trees)
}

// scanTrees returns the live members of each of trees (none a subreaper's)
// from one pass over /proc: each tree's process group (when its pid is
// known) and the processes that carry its id. It is the obituary's look at
// every process while the next leaders wait, so it reads with raw system
// calls into buffers it reuses, and reads /proc/PID/stat only for the
// processes it finds: a process's group comes from getpgid(2), a tenth of a
// microsecond, where stat costs some 6 µs (the kernel formats 52 fields),
// more than the environment, which is all that is left to read. So it
// reads the environment of every process outside the trees' groups, rather
// than stat to skip those that started before the programs.
func scanTrees(trees []*programTree) [][]proc {
	out := make([][]proc, len(trees))
	byPgrp := make(map[int]int, len(trees))
	ids := make(map[string]int, len(trees))
	for i, t := range trees {
		if t.pid > 0 {
			byPgrp[t.pid] = i
		}
		ids[t.id] = i
	}
	self := os.Getpid()
	s := scanners.Get().(*procScan)
	defer scanners.Put(s)
	_ = s.each(func(dirfd, pid int) {
		if pid == self {
			return
		}
		pgrp, err := unix.Getpgid(pid)
		if err != nil {
			return // gone
		}
		i, ok := byPgrp[pgrp]
		if !ok {
			if i, ok = s.programOf(dirfd, pid, ids); !ok {
				return
			}
		}
		stat, ok := s.read(dirfd, pid, "stat")
		if !ok {
			return // gone
		}
		p, ok := parseStat(pid, stat)
		// Only processes started with or after the program carry its id.
		if !ok || p.zombie || (p.pgrp != trees[i].pid && p.start < trees[i].start) || isHelper(pid) {
			return
		}
		out[i] = append(out[i], p)
	})
	return out
}

// procScan is a walk of /proc with its buffers.
type procScan struct {
	dirents []byte // getdents64's
	path    []byte // "PID/NAME\x00"
	buf     []byte // a file's contents
}

var scanners = sync.Pool{New: func() any {
	return &procScan{dirents: make([]byte, 32<<10), path: make([]byte, 0, 64), buf: make([]byte, 8<<10)}
}}

// each calls f with each pid in /proc, and a descriptor of /proc.
func (s *procScan) each(f func(dirfd, pid int)) error {
	dirfd, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	for {
		n, err := unix.Getdents(dirfd, s.dirents)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := s.dirents[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := b[19:reclen]
			if j := bytes.IndexByte(name, 0); j >= 0 {
				name = name[:j]
			}
			if pid := atou(name); pid > 0 && len(name) > 0 {
				f(dirfd, int(pid))
			}
			b = b[reclen:]
		}
	}
}

// read returns the contents of /proc/PID/NAME (valid until the next read),
// or false when it cannot be read (the process is gone, or not this
// user's).
func (s *procScan) read(dirfd, pid int, name string) ([]byte, bool) {
	s.path = strconv.AppendInt(s.path[:0], int64(pid), 10)
	s.path = append(append(append(s.path, '/'), name...), 0)
	// openat(2) on the reused path: syscall.Openat would copy it.
	r, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&s.path[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return nil, false
	}
	fd := int(r)
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(s.buf) {
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		m, err := unix.Read(fd, s.buf[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, false
		case m == 0:
			return s.buf[:n], true
		}
		n += m
	}
}

// programOf returns which of ids (LEASECTL_PROGRAM_ID values) the initial
// environment of process pid carries.
func (s *procScan) programOf(dirfd, pid int, ids map[string]int) (int, bool) {
	env, ok := s.read(dirfd, pid, "environ")
	if !ok {
		return 0, false
	}
	prefix := []byte(programIDVar + "=")
	for len(env) > 0 {
		v := env
		if j := bytes.IndexByte(env, 0); j >= 0 {
			v, env = env[:j], env[j+1:]
		} else {
			env = nil
		}
		if bytes.HasPrefix(v, prefix) {
			i, ok := ids[string(v[len(prefix):])] // no allocation: a map lookup
			return i, ok
		}
	}
	return 0, false
}
