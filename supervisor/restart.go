package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/leasectl/leasectl/lease"
)

// RestartPolicy says what [Run] does when work returns by itself, while ctx
// goes on.
//
// A worker that exits after each batch, or crashes, should run again on
// whichever replica leads next, not take the replica out of the election.
// Restarting through Run rather than inside work releases the key between
// two runs: a stand-by in the server's lock queue may take over, and every
// run starts with a fresh proof of the lease, a new term and the stop fence.
type RestartPolicy struct {
	// Restart runs work again after it returned nil or an *ExitError (a
	// program that ran and exited, whatever its status): Run waits Delay,
	// stands by and leads again. Any other error (a *StartError, a
	// *lease.ConfigError) would recur and ends Run. False: Run returns
	// what work returned, like [lease.Run].
	Restart bool
	// Delay is the wait between work returning and standing by again.
	// Zero means the lease's RetryInterval (default 5 s).
	Delay time.Duration
	// OnRestart, when set, is called before each wait with what work
	// returned and the wait, instead of the default log line ("work
	// returned; standing by again" at Info on the lease's Logger).
	OnRestart func(err error, delay time.Duration)
}

// Run is [lease.Run] with a restart policy: it holds the lease described by
// cfg and calls work while it does, and when work returns by itself and p
// says so, it releases the key, waits p.Delay and runs the lease again,
// until ctx ends.
//
// It returns what lease.Run returns, with one addition: when ctx ends
// during the wait between two runs, it returns what work last returned.
// Each run reports its states to cfg.OnStateChange from Connecting to
// Stopped; a restart goes through Stopped.
func Run(ctx context.Context, cfg lease.Config, work func(context.Context) error, p RestartPolicy) error {
	delay := p.Delay
	if delay <= 0 {
		delay = cfg.RetryInterval
	}
	if delay <= 0 {
		delay = lease.DefaultRetryInterval
	}
	for {
		err := lease.Run(ctx, cfg, work)
		var exit *ExitError
		if !p.Restart || ctx.Err() != nil || (err != nil && !errors.As(err, &exit)) {
			return err
		}
		if p.OnRestart != nil {
			p.OnRestart(err, delay)
		} else if cfg.Logger != nil {
			cfg.Logger.Info("work returned; standing by again", "role", cfg.Name(), "key", cfg.Key, "after", delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// Again returns p as the Again of a group's role (lease.GroupRole): the
// same rule as Run's, with onRestart, when not nil, called before each
// wait instead of p.OnRestart.
func (p RestartPolicy) Again(onRestart func(err error, delay time.Duration)) func(error) (time.Duration, bool) {
	if !p.Restart {
		return nil
	}
	delay := p.Delay
	if delay <= 0 {
		delay = lease.DefaultRetryInterval
	}
	if onRestart == nil {
		onRestart = p.OnRestart
	}
	return func(err error) (time.Duration, bool) {
		var exit *ExitError
		if err != nil && !errors.As(err, &exit) {
			return 0, false
		}
		if onRestart != nil {
			onRestart(err, delay)
		}
		return delay, true
	}
}
