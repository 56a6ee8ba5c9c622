package rabbitmq_test

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/rabbitmq"
)

// request is what a management API stand-in received.
type request struct {
	method, path, user, password, contentType string
	body                                      map[string]any
}

// managementStandIn answers every request with status and body, and hands
// over what it received.
func managementStandIn(t *testing.T, status int, body string) (*httptest.Server, <-chan request) {
	t.Helper()
	got := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r0 := request{method: r.Method, path: r.URL.EscapedPath(), contentType: r.Header.Get("Content-Type")}
		r0.user, r0.password, _ = r.BasicAuth()
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &r0.body)
		got <- r0
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

var limitPolicy = rabbitmq.Policy{Name: "acemq-delivery-limit", Pattern: `^(?!acemq\.schedule\.).*(?<!\.dlq)(?<!\.parked)$`,
	ApplyTo: "queues", Definition: map[string]any{"delivery-limit": 20}}

// SetPolicy PUTs the policy to /api/policies/<vhost>/<name> with the AMQP
// URL's credentials, and tells a policy set from one refused and from an
// API that does not answer.
func TestManagementSetPolicy(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for name, tc := range map[string]struct {
		status      int
		body        string
		notListened bool
		check       func(t *testing.T, err error)
	}{
		"answered (created)":  {status: http.StatusCreated, check: func(t *testing.T, err error) { require.NoError(t, err) }},
		"answered (replaced)": {status: http.StatusNoContent, check: func(t *testing.T, err error) { require.NoError(t, err) }},
		"refused: unauthorized": {status: http.StatusUnauthorized, body: `{"error":"not_authorized","reason":"Not management user"}`,
			check: func(t *testing.T, err error) {
				var me *rabbitmq.ManagementError
				require.ErrorAs(t, err, &me)
				require.Equal(t, http.StatusUnauthorized, me.Status)
				require.Equal(t, "not_authorized: Not management user", me.Reason)
				require.NotErrorIs(t, err, rabbitmq.ErrManagementUnavailable)
				require.ErrorContains(t, err, "answered 401 Unauthorized: not_authorized: Not management user")
			}},
		"refused: bad request": {status: http.StatusBadRequest, body: `{"error":"bad_request","reason":"Validation failed"}`,
			check: func(t *testing.T, err error) {
				var me *rabbitmq.ManagementError
				require.ErrorAs(t, err, &me)
				require.Equal(t, http.StatusBadRequest, me.Status)
			}},
		"not listening": {notListened: true, check: func(t *testing.T, err error) {
			require.ErrorIs(t, err, rabbitmq.ErrManagementUnavailable)
			require.ErrorContains(t, err, "connection refused")
			var me *rabbitmq.ManagementError
			require.False(t, errors.As(err, &me))
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := closed.URL
			var got <-chan request
			if !tc.notListened {
				var srv *httptest.Server
				srv, got = managementStandIn(t, tc.status, tc.body)
				base = srv.URL
			}
			m, err := rabbitmq.Config{}.Management("amqp://app:s3cret@rabbit-1:5672/", rabbitmq.ManagementConfig{URL: base})
			require.NoError(t, err)
			err = m.SetPolicy(t.Context(), limitPolicy)
			tc.check(t, err)
			if err != nil {
				require.NotContains(t, err.Error(), "s3cret")
			}
			if got == nil {
				return
			}
			r := <-got
			require.Equal(t, request{method: http.MethodPut, path: "/api/policies/%2F/acemq-delivery-limit", user: "app", password: "s3cret",
				contentType: "application/json", body: map[string]any{
					"pattern": limitPolicy.Pattern, "apply-to": "queues", "priority": float64(0),
					"definition": map[string]any{"delivery-limit": float64(20)}}}, r)
		})
	}
}

// The API is found from the AMQP URL: the node's host, http on 15672 for
// amqp://, https on 15671 for amqps://, the URL's virtual host and
// credentials (amqp091-go's guest/guest without any); a management URL
// given wins, with its own credentials when it has any.
func TestManagementFromTheAMQPURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		amqpURL string
		mc      rabbitmq.ManagementConfig
		url     string
		vhost   string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", rabbitmq.ManagementConfig{}, "http://127.0.0.1:15672/", "/"},
		{"amqp://localhost", rabbitmq.ManagementConfig{}, "http://localhost:15672/", "/"},
		{"amqps://app:pw@rabbit-1:5671/orders", rabbitmq.ManagementConfig{}, "https://rabbit-1:15671/", "orders"},
		{"amqp://app:pw@rabbit-1:5672,rabbit-2:5672/%2f", rabbitmq.ManagementConfig{Node: "rabbit-2:5672"}, "http://rabbit-2:15672/", "/"},
		{"amqp://app:pw@[::1]:5672/a%2Fb", rabbitmq.ManagementConfig{}, "http://[::1]:15672/", "a/b"},
		{"amqp://app:pw@rabbit-1/orders", rabbitmq.ManagementConfig{URL: "https://admin:x@mgmt.internal/rabbitmq"}, "https://mgmt.internal/rabbitmq/", "orders"},
	} {
		m, err := rabbitmq.Config{}.Management(tc.amqpURL, tc.mc)
		require.NoError(t, err, tc.amqpURL)
		require.Equal(t, tc.url, m.URL(), tc.amqpURL)
		require.Equal(t, tc.vhost, m.VHost(), tc.amqpURL)
	}

	for _, tc := range []struct {
		amqpURL string
		// ownUser gives the management URL user admin, password secret.
		ownUser        bool
		user, password string
	}{
		{"amqp://rabbit-1/", false, "guest", "guest"},
		{"amqp://app@rabbit-1/", false, "app", "guest"},
		{"amqp://app:pw@rabbit-1/", false, "app", "pw"},
		{"amqp://app:pw@rabbit-1/", true, "admin", "secret"},
	} {
		srv, got := managementStandIn(t, http.StatusCreated, "")
		mc := rabbitmq.ManagementConfig{URL: srv.URL}
		if tc.ownUser {
			mc.URL = "http://admin:secret@" + srv.Listener.Addr().String() + "/"
		}
		m, err := rabbitmq.Config{}.Management(tc.amqpURL, mc)
		require.NoError(t, err)
		require.NoError(t, m.SetPolicy(t.Context(), limitPolicy))
		r := <-got
		require.Equal(t, [2]string{tc.user, tc.password}, [2]string{r.user, r.password}, tc.amqpURL)
		require.NotContains(t, m.URL(), "secret")
	}

	for name, tc := range map[string]struct {
		amqpURL string
		mc      rabbitmq.ManagementConfig
	}{
		"ftp management URL": {"amqp://rabbit-1/", rabbitmq.ManagementConfig{URL: "ftp://rabbit-1/"}},
		"no host":            {"amqp://rabbit-1/", rabbitmq.ManagementConfig{URL: "http:///api"}},
		"bad AMQP URL":       {"ftp://rabbit-1/", rabbitmq.ManagementConfig{}},
		"bad node":           {"amqp://rabbit-1/", rabbitmq.ManagementConfig{Node: "rabbit-1"}},
		"negative timeout":   {"amqp://rabbit-1/", rabbitmq.ManagementConfig{Timeout: -1}},
	} {
		_, err := rabbitmq.Config{}.Management(tc.amqpURL, tc.mc)
		require.Error(t, err, name)
	}
}

// An https API is verified with the broker's TLS settings: the URL's
// cacertfile here. Without them, the system's CAs do not know the
// stand-in's certificate, and that is an answer, not an API missing.
func TestManagementOverTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	m, err := rabbitmq.Config{}.Management("amqps://guest:guest@127.0.0.1:5671/?cacertfile="+ca, rabbitmq.ManagementConfig{URL: srv.URL})
	require.NoError(t, err)
	require.NoError(t, m.SetPolicy(t.Context(), limitPolicy))

	m, err = rabbitmq.Config{CAFile: ca}.Management("amqps://guest:guest@127.0.0.1:5671/", rabbitmq.ManagementConfig{URL: srv.URL})
	require.NoError(t, err)
	require.NoError(t, m.SetPolicy(t.Context(), limitPolicy), "Config.CAFile, as the binary's --broker-ca-file sets it")

	m, err = rabbitmq.Config{}.Management("amqps://guest:guest@127.0.0.1:5671/", rabbitmq.ManagementConfig{URL: srv.URL})
	require.NoError(t, err)
	err = m.SetPolicy(t.Context(), limitPolicy)
	require.ErrorContains(t, err, "certificate")
	require.NotErrorIs(t, err, rabbitmq.ErrManagementUnavailable)
}
