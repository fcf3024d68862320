package supervisor

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkObituaryTreeCheck is the cost of the obituary's check that a
// killed leader's program tree is gone, in the usual case: the program,
// started a moment before, died with leasectl (Pdeathsig), and nothing of
// its tree is left. It is what the next leader waits for before the end
// of the term is recorded.
func BenchmarkObituaryTreeCheck(b *testing.B) {
	id, err := programID()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), programIDVar+"="+id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	start := startTime(pid)
	watch := watchExit(pid, start)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if watch == nil || watch.fd < 0 {
		b.Log("no pidfd: the check falls back to /proc")
	}
	b.Run("kernel+scan", func(b *testing.B) {
		for b.Loop() {
			t := &programTree{pid: pid, id: id, start: start}
			awaitTrees([]*programTree{t}, []*exitWatch{watch}, time.Now().Add(10*time.Second))
			if left := signalTrees([]*programTree{t}, 0); left[0] != 0 {
				b.Fatalf("%d processes left of a tree that is gone", left[0])
			}
		}
	})
	// The look at /proc alone, for a program whose pid the obituary did
	// not learn: by its id only.
	b.Run("scan-by-id", func(b *testing.B) {
		for b.Loop() {
			t := &programTree{id: id, start: start}
			if left := signalTrees([]*programTree{t}, 0); left[0] != 0 {
				b.Fatalf("%d processes left of a tree that is gone", left[0])
			}
		}
	})
	watch.close()
}
