package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// applied is what topology apply -o json prints.
type applied struct {
	Queues []struct {
		Name string `json:"name"`
	} `json:"queues"`
	Policy *policyJSON `json:"delivery_limit_policy"`
}

func decodeApplied(t *testing.T, stdout string) applied {
	t.Helper()
	var v applied
	require.NoError(t, json.Unmarshal([]byte(stdout), &v), stdout)
	return v
}

// On RabbitMQ, topology apply declares the ladder and sets the
// delivery-limit policy in the URL's virtual host, through the management
// API it finds from the URL alone, and says so; -o json reports it too.
// The rabbitmqctl command it reports sets the very same policy.
func TestTopologyApplyOnRabbitMQ(t *testing.T) {
	t.Parallel()
	api := testenv.ManagementURL(t)
	// A virtual host of the test's own: the policy is the virtual host's,
	// and the fixed name of a real deployment.
	amqpURL := testenv.VHost(t)
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	vhost := strings.TrimPrefix(u.Path, "/")
	ladder := testenv.Name(t, "ladder")
	env := map[string]string{"ACEMQ_URL": amqpURL}

	r := execute(t, env, "topology", "apply", "--ladder", ladder)
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stderr, "guest:guest")
	require.Equal(t, broker.LadderTopology(ladder).String()+"\n", r.stdout)
	require.Contains(t, r.stderr, "set policy acemq-delivery-limit in vhost "+vhost+" through "+api+`: {"delivery-limit":20} on every consumer queue`)
	p := broker.DeliveryLimitPolicy(ladder)
	want := map[string]testenv.Policy{p.Name: {Pattern: p.Pattern, ApplyTo: "queues", Definition: `{"delivery-limit":20}`}}
	require.Equal(t, want, testenv.Policies(t, amqpURL))

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn, err := broker.Open(ctx, amqpURL)
	require.NoError(t, err)
	defer func() { require.NoError(t, conn.Close(ctx)) }()
	for _, q := range broker.LadderTopology(ladder).Queues {
		_, err := conn.Transport().Inspect(ctx, q.Name)
		require.NoError(t, err, q.Name)
	}

	r = execute(t, env, "topology", "apply", "--ladder", ladder, "-o", "json")
	require.Zero(t, r.code, r.stderr)
	v := decodeApplied(t, r.stdout)
	require.Len(t, v.Queues, len(broker.LadderTopology(ladder).Queues))
	require.NotNil(t, v.Policy)
	require.Equal(t, policyJSON{Name: p.Name, VHost: vhost, Pattern: p.Pattern, ApplyTo: "queues", Definition: map[string]any{"delivery-limit": float64(20)},
		Set: true, ManagementURL: api, Command: v.Policy.Command}, *v.Policy, "set again: it replaces itself")
	require.Equal(t, want, testenv.Policies(t, amqpURL))

	out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "clear_policy", "-p", vhost, p.Name).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Empty(t, testenv.Policies(t, amqpURL))
	out, err = exec.CommandContext(ctx, "sh", "-c", v.Policy.Command).CombinedOutput()
	require.NoError(t, err, "%s\n%s", v.Policy.Command, out)
	require.Equal(t, want, testenv.Policies(t, amqpURL), "the command sets what the API was sent")
}

// Where the management API refuses or does not answer, topology apply
// still succeeds (the ladder is declared), says the policy was not set and
// why, and prints the rabbitmqctl command that sets it, in text and in
// JSON. Against a stand-in of the API, in a virtual host of the test's own:
// should the stand-in not be asked, the policy lands there, not on every
// queue of the default virtual host other tests share.
func TestTopologyApplyPolicyThroughTheManagementAPI(t *testing.T) {
	t.Parallel()
	amqpURL := testenv.VHost(t)
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	vhost := strings.TrimPrefix(u.Path, "/")
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for name, tc := range map[string]struct {
		status int
		body   string
		// down: nothing listens at the management URL.
		down bool
		// says is on stderr, error in the JSON.
		says, error string
	}{
		"answered": {status: http.StatusCreated, says: "set policy acemq-delivery-limit in vhost " + vhost + " through "},
		"refused (401)": {status: http.StatusUnauthorized, body: `{"error":"not_authorized","reason":"Login failed"}`,
			says: "the delivery-limit policy was NOT set: ", error: "answered 401 Unauthorized: not_authorized: Login failed"},
		"not listening": {down: true, says: "the delivery-limit policy was NOT set: ", error: "the management API does not answer"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ladder := testenv.Name(t, "ladder")
			t.Cleanup(func() { deleteLadder(t, amqpURL, ladder) })
			api := closed.URL + "/"
			var puts chan string
			if !tc.down {
				puts = make(chan string, 2)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					user, password, _ := r.BasicAuth()
					body, _ := io.ReadAll(r.Body)
					puts <- r.Method + " " + r.URL.EscapedPath() + " " + user + ":" + password + " " + string(body)
					w.WriteHeader(tc.status)
					_, _ = io.WriteString(w, tc.body)
				}))
				t.Cleanup(srv.Close)
				api = srv.URL + "/"
			}
			p := broker.DeliveryLimitPolicy(ladder)
			command := `rabbitmqctl set_policy -p '` + vhost + `' --apply-to queues --priority 0 'acemq-delivery-limit' '` + p.Pattern + `' '{"delivery-limit":20}'`

			r := execute(t, map[string]string{"ACEMQ_URL": amqpURL, "ACEMQ_MANAGEMENT_URL": api}, "topology", "apply", "--ladder", ladder)
			require.Zero(t, r.code, r.stderr)
			require.Equal(t, broker.LadderTopology(ladder).String()+"\n", r.stdout)
			require.Contains(t, r.stderr, tc.says+func() string {
				if tc.error == "" {
					return api
				}
				return ""
			}())
			if tc.error != "" {
				require.Contains(t, r.stderr, tc.error)
				require.Contains(t, r.stderr, "\nset it with:\n  "+command+"\n")
			} else {
				require.NotContains(t, r.stderr, "rabbitmqctl")
			}
			if puts != nil {
				got := <-puts
				pattern, err := json.Marshal(p.Pattern)
				require.NoError(t, err)
				require.Equal(t, "PUT /api/policies/"+url.PathEscape(vhost)+"/acemq-delivery-limit guest:guest "+
					`{"pattern":`+string(pattern)+`,"apply-to":"queues","priority":0,"definition":{"delivery-limit":20}}`, got)
			}

			r = execute(t, map[string]string{"ACEMQ_URL": amqpURL}, "topology", "apply", "--ladder", ladder, "--management-url", api, "-o", "json")
			require.Zero(t, r.code, r.stderr)
			v := decodeApplied(t, r.stdout)
			require.NotNil(t, v.Policy)
			require.Equal(t, tc.error == "", v.Policy.Set)
			require.Equal(t, api, v.Policy.ManagementURL)
			require.Equal(t, vhost, v.Policy.VHost)
			require.Equal(t, command, v.Policy.Command)
			if tc.error != "" {
				require.Contains(t, v.Policy.Error, tc.error)
			} else {
				require.Empty(t, v.Policy.Error)
			}
		})
	}
}

// The embedded broker has no policies: topology apply sets none there
// and reports none, and refuses a management URL rather than ignore it.
// A management URL that is not one is refused before anything is
// declared.
func TestTopologyApplyManagementURLRefusals(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "topology", "apply", "--url", "memory://", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	require.Nil(t, decodeApplied(t, r.stdout).Policy)
	require.NotContains(t, r.stderr, "policy")

	r = execute(t, nil, "topology", "apply", "--url", "memory://", "--management-url", "http://127.0.0.1:15672/")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--management-url (ACEMQ_MANAGEMENT_URL) names RabbitMQ's management API, but the broker is not RabbitMQ")

	// Nothing listens on port 1: had it dialled, the error would say so.
	r = execute(t, nil, "topology", "apply", "--url", "amqp://127.0.0.1:1/", "--management-url", "ftp://user:s3cret-pw@127.0.0.1/")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `--management-url: rabbitmq: invalid URL: management URL: scheme "ftp", want http or https`)
	require.NotContains(t, r.stderr, "s3cret-pw")
	require.NotContains(t, r.stderr, "declared")
}
