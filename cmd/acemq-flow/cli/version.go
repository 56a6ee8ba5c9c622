package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// versionInfo is what `version --output json` prints.
type versionInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func (a *app) versionCommand() *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version (Version) and the Go version it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := versionInfo{Version: Version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
			out := cmd.OutOrStdout()
			if output == outputJSON {
				return writeJSON(out, info)
			}
			_, err := fmt.Fprintf(out, "%s %s (%s, %s/%s)\n", a.name, info.Version, info.Go, info.OS, info.Arch)
			return err
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
