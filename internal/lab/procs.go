package lab

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
)

// The parsers below read what macOS reports about processes (see
// procs_darwin.go). They are plain functions of bytes, so that their tests
// run on every system.

// procArgs returns the arguments in a buffer of sysctl kern.procargs2: argc
// as a 32-bit integer in the machine's byte order, the executable's path,
// NUL bytes of padding, the argc arguments, each ended by a NUL, and then
// the environment, which it leaves out. nil when buf is too short.
func procArgs(buf []byte) []string {
	if len(buf) < 4 {
		return nil
	}
	argc := int(binary.NativeEndian.Uint32(buf))
	rest := buf[4:]
	end := bytes.IndexByte(rest, 0)
	if end < 0 {
		return nil
	}
	rest = bytes.TrimLeft(rest[end:], "\x00")
	var args []string
	for len(args) < argc && len(rest) > 0 {
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			end = len(rest)
		}
		args = append(args, string(rest[:end]))
		rest = rest[min(end+1, len(rest)):]
	}
	return args
}

// argsMention reports whether a command line names a path in dir, as
// ProcessesUsing counts it on Linux: dir followed by a slash, anywhere.
func argsMention(args []string, dir string) bool {
	return strings.Contains(strings.Join(args, "\x00"), dir+"/")
}

// within reports whether path is dir or lies under it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// parseLsofCwd reads the output of `lsof -d cwd -F pn`: for each process a
// line "p" followed by its pid, then a line "fcwd" and a line "n" followed
// by the path of its working directory. It returns the path by pid.
func parseLsofCwd(out []byte) map[int]string {
	cwds := map[int]string{}
	pid := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		switch line[0] {
		case 'p':
			pid, _ = strconv.Atoi(line[1:])
		case 'n':
			if pid > 0 {
				cwds[pid] = line[1:]
			}
		}
	}
	return cwds
}
