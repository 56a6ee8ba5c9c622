package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine/dashboard"
	"github.com/acemq/acemq-flow/engine/observe"
)

// DefaultDashboardAddr is where the dashboard listens unless told
// otherwise: this machine only.
const DefaultDashboardAddr = "127.0.0.1:8080"

// dashboardTokenEnv is the environment fallback of dashboard's --token.
const dashboardTokenEnv = "ACEMQ_DASHBOARD_TOKEN"

// noDatabaseDashboard is said on stderr by a dashboard of the binary
// program without a database.
func noDatabaseDashboard(program string) string {
	return "no database (" + databaseFlag + "): the dashboard reads the run journal in this process's memory, " +
		"where no run is recorded, so it shows nothing; set ACEMQ_DATABASE_URL to the workers' database, " +
		"or try `" + program + " dev`: a worker, example runs and the dashboard in one process, with nothing installed"
}

// Notes on stderr about what a dashboard can and cannot do.
const (
	noFlowsDashboard = "this binary has no flows: the dashboard only reads (no replay or compensate)"
	// noBrokerDashboard: replaying into a broker of the dashboard's own
	// would move messages no worker reads.
	noBrokerDashboard = "no broker (--url / ACEMQ_URL): the dashboard only reads (no replay or compensate)"
)

func (a *app) dashboardCommand() *cobra.Command {
	var (
		bf        brokerFlags
		addr      string
		token     string
		tokenName string
		hosts     []string
		readOnly  bool
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard: runs, timelines, failed runs grouped, charts; replay and compensate",
		Long: "Serve the web dashboard on --addr until SIGINT or SIGTERM: the runs of the run journal with\n" +
			"filters, each run's timeline, failed runs grouped by flow, step and error, and charts of\n" +
			"the last hour, read from the database (--database-url, the workers' journal); failed runs\n" +
			"are replayed or compensated through the broker (--url), as `" + a.name + " replay` does. It\n" +
			"needs no worker beside it. Without --url it only reads.\n\n" +
			"It listens on 127.0.0.1 unless --addr says otherwise. With --token (or " + dashboardTokenEnv + ")\n" +
			"every page asks for the token; without one, give the dashboard to this machine only.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if !a.logLevelSet {
				a.logLevel = slog.LevelInfo
			}
			ln, err := listen(cmd, "--addr", addr)
			if err != nil {
				return err
			}
			defer ln.Close() // if never served: Serve closes it
			cfg := dashboard.Config{Token: token, TokenName: tokenName, Hosts: hosts, ReadOnly: readOnly, Logger: a.logger(cmd), Secrets: a.flowSecrets()}
			if len(a.flows) == 0 || bf.url == "" {
				if len(a.flows) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), noFlowsDashboard)
				} else {
					fmt.Fprintln(cmd.ErrOrStderr(), noBrokerDashboard)
				}
				j, done, jerr := a.openJournal(cmd)
				if jerr != nil {
					return jerr
				}
				defer done()
				cfg.Journal, cfg.ReadOnly = j, true
			} else {
				s, serr := a.openSession(cmd, sessionConfig{broker: bf, noDatabase: noDatabaseDashboard(a.name)})
				if serr != nil {
					return serr
				}
				defer s.close(cmd.Context(), &err)
				cfg.Engine = s.eng
			}
			h, err := dashboard.New(cfg)
			if err != nil {
				return err
			}
			defer closeDashboard(cmd.Context(), h, &err)
			announceDashboard(cmd, ln, token)
			return serveDashboard(cmd.Context(), ln, h)
		},
	}
	bf.add(cmd)
	addDashboardAddrFlag(cmd, &addr)
	cmd.Flags().StringVar(&token, "token", "", "require this token on every page: typed into the login form, or sent as Authorization: Bearer <token> (default: none)")
	setFlagEnv(cmd.Flags(), "token", dashboardTokenEnv)
	cmd.Flags().StringVar(&tokenName, "token-name", "", "who holds the token: the actor the run's timeline records for what is done from the dashboard (default: dashboard)")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "without a token, the host names the dashboard answers to besides IP addresses and localhost (it refuses others, against DNS rebinding)")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "hide and refuse replay and compensate")
	return cmd
}

// addDashboardAddrFlag registers --addr on cmd.
func addDashboardAddrFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "addr", DefaultDashboardAddr, "address the dashboard listens on (0.0.0.0:8080: every interface; port 0 picks a free one)")
}

// dashboardCloseTimeout bounds stopping a dashboard's group replay, which
// stops between two messages.
const dashboardCloseTimeout = 10 * time.Second

// closeDashboard stops the dashboard's group replay before the engine it
// replays with is closed, adding a failure to *err.
func closeDashboard(ctx context.Context, d *dashboard.Dashboard, err *error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dashboardCloseTimeout)
	defer cancel()
	*err = errors.Join(*err, d.Close(ctx))
}

// serveDashboard serves h on ln until ctx ends, naming the flag in its
// failure.
func serveDashboard(ctx context.Context, ln net.Listener, h http.Handler) error {
	if err := observe.Serve(ctx, ln, h); err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	return nil
}

// announceDashboard says on stderr where to open the dashboard, and warns
// when other machines can reach it without a token.
func announceDashboard(cmd *cobra.Command, ln net.Listener, token string) {
	out := cmd.ErrOrStderr()
	fmt.Fprintf(out, "dashboard: open %s in a browser (Ctrl-C stops it)\n", browseURL(ln.Addr()))
	if token != "" {
		fmt.Fprintln(out, "the dashboard asks for its token (--token / "+dashboardTokenEnv+") on every page")
	} else if w := exposedWarning(ln.Addr()); w != "" {
		fmt.Fprintln(out, w+" (set --token or "+dashboardTokenEnv+")")
	}
}

// exposedWarning warns that a dashboard without a token on addr can be
// reached from other machines; "" when it cannot.
func exposedWarning(addr net.Addr) string {
	if isLoopback(addr) {
		return ""
	}
	return fmt.Sprintf("warning: the dashboard listens on %s, which other machines can reach, and has no token: "+
		"anyone who reaches it can replay and compensate runs", addr)
}

// browseURL is the address a person opens to reach what a listener on
// addr serves: a listener on every interface is reached as localhost.
func browseURL(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err == nil && ap.Addr().IsUnspecified() {
		return fmt.Sprintf("http://localhost:%d/", ap.Port())
	}
	return "http://" + addr.String() + "/"
}
