package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNodeLists(t *testing.T) {
	t.Parallel()
	const raw = "amqps://guest:guest@127.0.0.1:5691,127.0.0.1:5692,127.0.0.1:5693/?cacertfile=/x/ca.pem"
	nodes, err := nodeList(raw)
	require.NoError(t, err)
	require.Equal(t, []string{"127.0.0.1:5691", "127.0.0.1:5692", "127.0.0.1:5693"}, nodes)

	n, err := nodeNumber(raw, "127.0.0.1:5692")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = nodeNumber(raw, "127.0.0.1:5681")
	require.ErrorContains(t, err, "node 127.0.0.1:5681 is not in the broker URL's list")

	rotated, err := fromNode(2)(raw)
	require.NoError(t, err)
	require.Equal(t, "amqps://guest:guest@127.0.0.1:5692,127.0.0.1:5693,127.0.0.1:5691/?cacertfile=/x/ca.pem", rotated)
	require.Equal(t, "amqps://guest:guest@127.0.0.1:5691/?cacertfile=/x/ca.pem", firstNode(raw))
	require.Equal(t, "amqp://guest:guest@h:1/", firstNode("amqp://guest:guest@h:1/"))
	_, err = fromNode(4)(raw)
	require.Error(t, err)
}

func TestConnectedLine(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		`time=x level=INFO msg="rabbitmq connected" transport=amqp://guest@127.0.0.1:5681,127.0.0.1:5682/ node=127.0.0.1:5681 generation=1`: "127.0.0.1:5681",
		`time=x level=INFO msg="rabbitmq reconnected" transport=amqp://guest@a:1,b:2/ node=b:2 generation=2 attempt=1 local=x previous=a:1`: "b:2",
	} {
		m := connectedLine.FindStringSubmatch(line)
		require.NotNil(t, m, line)
		require.Equal(t, want, m[1])
	}
	require.Nil(t, connectedLine.FindStringSubmatch(`msg="rabbitmq redialling" node=b:2`))
}
