package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine"
)

// errNoPayload: start was given no --payload.
var errNoPayload = errors.New("--payload is required")

func (a *app) startCommand() *cobra.Command {
	var (
		bf      brokerFlags
		output  outputFormat
		payload string
		runID   string
		again   bool
		in      time.Duration
		at      timeFlag
		by      actionFlags
	)
	cmd := &cobra.Command{
		Use:   "start <flow> --payload '<json>'",
		Short: "Start a run of a flow and print its run id",
		Long: "Start a run of the flow with the JSON payload (--payload -: read it from stdin), now or\n" +
			"later (--in, --at: the run waits on the scheduler ladder), and print its run id. A payload\n" +
			"that does not fit the flow's input type is refused before anything is published.\n\n" +
			"Starting is idempotent on --run-id: a start under the id of a run that exists prints that\n" +
			"run (its status on stderr, existing and status with -o json), publishes nothing and exits 0.\n" +
			"--again starts a run that has finished again, as its next replay: every step anew, on the\n" +
			"payload given, recorded in its timeline; a run still in flight is refused.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			flow := args[0]
			infos, err := a.describeFlows(cmd.Context(), func(e *engine.Engine) ([]engine.FlowInfo, error) {
				fi, err := e.Flow(flow)
				return []engine.FlowInfo{fi}, err
			})
			if err != nil {
				return fmt.Errorf("start: %w", err)
			}
			fi := infos[0]
			opts, err := startOptions(runID, again, in, at.t)
			if err != nil {
				return fmt.Errorf("start %s: %w", flow, err)
			}
			opts = append(opts, engine.StartedBy(by.action()))
			body, err := readPayload(payload, cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("start %s: %w%s", flow, err, exampleHint(fi))
			}
			s, err := a.openSession(cmd, sessionConfig{broker: bf, noDatabase: noDatabaseStart})
			if err != nil {
				return err
			}
			defer s.close(cmd.Context(), &err)
			started, err := s.eng.Start(cmd.Context(), flow, body, opts...)
			switch {
			case errors.Is(err, engine.ErrInvalidPayload):
				return fmt.Errorf("start %s: %w%s", flow, err, exampleHint(fi))
			case err != nil:
				return err
			}
			// The journal must have the start before this process exits.
			if err := s.eng.Flush(cmd.Context()); err != nil {
				return fmt.Errorf("start %s: run %s started, but its start was not journaled: %w", flow, started.RunID, err)
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), started)
			}
			switch {
			case started.Existing:
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s of %s exists (%s): nothing started (--again starts a finished run again)\n",
					started.RunID, started.Flow, started.Status)
			case started.Replays > 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s of %s started again (replay %d)\n", started.RunID, started.Flow, started.Replays)
			}
			if !started.DueAt.IsZero() {
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s of %s waits until %s\n", started.RunID, started.Flow, localTime(started.DueAt, time.RFC3339))
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), started.RunID)
			return err
		},
	}
	bf.add(cmd)
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&payload, "payload", "", "the run's input as JSON, or - to read it from stdin")
	cmd.Flags().StringVar(&runID, "run-id", "", "start the run under this id instead of a new one (a start under the id of a run that exists prints that run)")
	cmd.Flags().BoolVar(&again, "again", false, "with --run-id: start a run that has finished again, every step anew")
	cmd.Flags().DurationVar(&in, "in", 0, "start the run after this long (30m, 2h) instead of now")
	cmd.Flags().Var(&at, "at", "start the run at this time (RFC 3339: 2026-12-24T09:00:00Z) instead of now")
	by.add(cmd, "why the run is started, kept in its timeline (with who: --actor, default the OS user)")
	return cmd
}

// startOptions turns the flags of start into engine options: at most one
// of in and at (a zero value is not given), in not negative, and again
// only with a run id.
func startOptions(runID string, again bool, in time.Duration, at time.Time) ([]engine.StartOption, error) {
	var opts []engine.StartOption
	if runID != "" {
		opts = append(opts, engine.RunID(runID))
	}
	if again {
		if runID == "" {
			return nil, errors.New("--again starts a run again: give its --run-id")
		}
		opts = append(opts, engine.StartAgain())
	}
	switch {
	case in != 0 && !at.IsZero():
		return nil, errors.New("give --in or --at, not both")
	case in < 0:
		return nil, fmt.Errorf("--in %s: want a duration of 0 or more", in)
	case in > 0:
		opts = append(opts, engine.In(in))
	case !at.IsZero():
		opts = append(opts, engine.At(at))
	}
	return opts, nil
}

// readPayload is the JSON of --payload: the flag's value, or stdin for
// "-". It refuses none, and what is not JSON, before anything connects.
func readPayload(flag string, stdin io.Reader) (json.RawMessage, error) {
	var body []byte
	switch flag {
	case "":
		return nil, errNoPayload
	case "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read the payload from stdin: %w", err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: stdin was empty (--payload -)", errNoPayload)
		}
		body = b
	default:
		body = []byte(flag)
	}
	var v json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("%w: the payload is not JSON: %w", engine.ErrInvalidPayload, err)
	}
	return v, nil
}

// exampleHint shows the flow's example payload as a --payload flag, ""
// when it has none.
func exampleHint(fi engine.FlowInfo) string {
	if len(fi.ExamplePayload) == 0 {
		return fmt.Sprintf(" (the payload is a JSON %s)", fi.Input)
	}
	return fmt.Sprintf(", e.g. --payload %s", shellQuote(string(fi.ExamplePayload)))
}

// timeFlag is a time given as RFC 3339; the zero time when not given.
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(s string) error {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("%q is not an RFC 3339 time such as 2026-12-24T09:00:00Z", s)
	}
	f.t = t
	return nil
}

func (f *timeFlag) Type() string { return "time" }
