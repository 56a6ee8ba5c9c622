package cli

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// brokerTLSNode is a TLS listener in front of the test broker, as a
// node's amqps listener: a certificate for 127.0.0.1 signed by ca, and a
// client certificate signed by ca required.
type brokerTLSNode struct {
	ca     *testenv.CA
	client testenv.Cert
	addr   string
}

func startBrokerTLSNode(t *testing.T) brokerTLSNode {
	t.Helper()
	u, err := url.Parse(testenv.RabbitURL(t))
	require.NoError(t, err)
	ca := testenv.NewCA(t, "acemq-cli-test-ca")
	server := ca.Issue(t, "node", "localhost", "127.0.0.1")
	p := testenv.StartProxy(t, u.Host, &tls.Config{Certificates: []tls.Certificate{server.TLS},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool, MinVersion: tls.VersionTLS12})
	return brokerTLSNode{ca: ca, client: ca.Issue(t, "client"), addr: p.Addr()}
}

// env is the environment that gives the binary TLS to the node.
func (n brokerTLSNode) env(caFile string) map[string]string {
	return map[string]string{"ACEMQ_BROKER_CA_FILE": caFile, "ACEMQ_BROKER_CERT_FILE": n.client.CertFile, "ACEMQ_BROKER_KEY_FILE": n.client.KeyFile}
}

// postgresTLS returns the test database URL (with the test's schema, as
// testSchema makes it) asking for TLS verified against the server's own
// certificate (sslmode=verify-ca): the test database's certificate is
// self-signed, as Debian's snakeoil one is, and issued to the machine's
// name rather than 127.0.0.1, which verify-full would refuse. It skips
// the test when the database does not speak TLS.
func postgresTLS(t *testing.T) string {
	t.Helper()
	raw := testSchema(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set("sslmode", "require")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Skipf("the test database does not speak TLS (sslmode=require: %v)", err)
	}
	defer conn.Close(context.Background())
	tc, ok := conn.PgConn().Conn().(*tls.Conn)
	require.True(t, ok, "sslmode=require gave a connection without TLS")
	certs := tc.ConnectionState().PeerCertificates
	root := certs[len(certs)-1]
	if root.CheckSignatureFrom(root) != nil {
		t.Skip("the test database's certificate chain does not end in a self-signed certificate to trust")
	}
	file := filepath.Join(t.TempDir(), "postgres-ca.pem")
	require.NoError(t, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw}), 0o600))
	q.Set("sslmode", "verify-ca")
	q.Set("sslrootcert", file)
	u.RawQuery = q.Encode()
	return u.String()
}

// A worker, migrate, start and runs, each a process of the binary, on a
// broker list whose first node refuses connections and whose second is
// amqps:// with a client certificate (the ACEMQ_BROKER_* settings), and
// on PostgreSQL over verified TLS: a run completes, and neither the
// password nor the key shows in any output.
func TestCommandsOverTLSAndANodeList(t *testing.T) {
	t.Parallel()
	fx := newCLIFixture(t, false)
	n := startBrokerTLSNode(t)
	fx.dbURL = postgresTLS(t)
	brokerURL := "amqps://guest:guest@127.0.0.1:1," + n.addr + "/"
	env := []string{"ACEMQ_URL=" + brokerURL, "ACEMQ_DATABASE_URL=" + fx.dbURL}
	for k, v := range n.env(n.ca.CertFile) {
		env = append(env, k+"="+v)
	}
	fx.env = append(fx.env, env...)
	key, err := os.ReadFile(n.client.KeyFile)
	require.NoError(t, err)
	keyBody := strings.Split(string(key), "\n")[1]
	secretFree := func(what, s string) {
		t.Helper()
		require.NotContains(t, s, "guest:guest", what)
		require.NotContains(t, s, keyBody, what)
	}

	var mig migrateResult
	r := fx.runJSON(&mig, "migrate")
	secretFree("migrate -o json", r.stdout+r.stderr)
	require.NotContains(t, mig.Database, "sslrootcert")

	w := fx.startWorker()
	require.Contains(t, w.stderr.String(), `msg="rabbitmq could not connect to a node; trying the next"`)
	require.Contains(t, w.stderr.String(), `msg="rabbitmq connected" transport=amqps://guest@127.0.0.1:1,`+n.addr+"/ node="+n.addr)
	id := fx.start("orders", `{"id":"tls","amount":3}`)
	done := fx.waitStatus(id, journal.Completed, 20*time.Second)
	require.Equal(t, "ship", done.Step)
	var runs []map[string]any
	r = fx.runJSON(&runs, "runs", "list")
	secretFree("runs list -o json", r.stdout+r.stderr)
	require.Zero(t, w.stop(t), w.stderr.String())
	secretFree("the worker's log", w.stderr.String())
}

// A broker certificate that does not verify, TLS settings for an amqp://
// URL and a database certificate that does not verify are each refused
// with an error that says so, naming the host and never the password.
func TestTLSRefusalsNameTheHost(t *testing.T) {
	t.Parallel()
	n := startBrokerTLSNode(t)
	wrong := testenv.NewCA(t, "wrong-ca")

	r := execute(t, mergeEnv(n.env(wrong.CertFile), map[string]string{"ACEMQ_URL": "amqps://guest:s3cret-pw@" + n.addr + "/"}), "topology", "apply")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "TLS handshake with "+n.addr+` (server name "127.0.0.1") failed: its certificate is not signed by a trusted CA`)
	require.NotContains(t, r.stderr, "s3cret-pw")

	r = execute(t, mergeEnv(n.env(n.ca.CertFile), map[string]string{"ACEMQ_URL": "amqp://guest:s3cret-pw@" + n.addr + "/"}), "topology", "apply")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--broker-ca-file (ACEMQ_BROKER_CA_FILE), --broker-cert-file (ACEMQ_BROKER_CERT_FILE), --broker-key-file (ACEMQ_BROKER_KEY_FILE) asks for TLS, but the broker URL is amqp://")
	require.NotContains(t, r.stderr, "s3cret-pw")

	db, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	db.User = url.UserPassword(db.User.Username(), "s3cret-pw")
	db.RawQuery = url.Values{"sslmode": {"verify-full"}, "sslrootcert": {wrong.CertFile}}.Encode()
	r = execute(t, map[string]string{"ACEMQ_DATABASE_URL": db.String()}, "migrate")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--database-url / ACEMQ_DATABASE_URL: connect to postgres://"+db.User.Username()+"@"+db.Hostname())
	require.Contains(t, r.stderr, "tls: failed to verify certificate")
	require.NotContains(t, r.stderr, "s3cret-pw")
}

// mergeEnv is a and b in one map, b winning.
func mergeEnv(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
