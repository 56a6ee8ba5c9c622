package enginepg

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedactedErrorKeepsItsCause(t *testing.T) {
	t.Parallel()
	cause := errors.New("password authentication failed for hunter2")
	r := redactor{secrets: []string{"hunter2", "k3y-pw"}}
	err := r.errorf("connect: %w (key k3y-pw)", cause)
	require.ErrorIs(t, err, cause)
	require.Equal(t, "connect: password authentication failed for xxxxx (key xxxxx)", err.Error())
	require.Equal(t, []string{"s3cret", "k3y"}, connSecrets("postgres://u:s3cret@h/db?sslmode=verify-full&sslpassword=k3y"))
	require.Equal(t, []string{"x", "y"}, connSecrets("host=h password=x sslpassword='y'"))
	require.Empty(t, connSecrets("postgres://u@h/db"))
}
