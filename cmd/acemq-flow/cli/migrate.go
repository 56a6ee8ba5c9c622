package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/persistence"
)

// migrateResult is what `migrate --output json` prints.
type migrateResult struct {
	Database string `json:"database"`
	// Applied lists the migrations this run applied (empty: the database
	// was up to date).
	Applied []migrationJSON `json:"applied"`
	// Versions lists every version the database has applied, now.
	Versions []int `json:"versions"`
}

type migrationJSON struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

func (a *app) migrateCommand() *cobra.Command {
	var output outputFormat
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the database's tables (run journal, idempotency, outbox, schemas)",
		Long: "Apply the migrations embedded in this binary that the database (--database-url) has not\n" +
			"applied yet, and say which. It is safe to run again, and from several processes at once.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.databaseURL == "" {
				return fmt.Errorf("migrate: %w", ErrNoDatabase)
			}
			db, err := a.openStores(cmd, enginepg.Config{Migrations: enginepg.ApplyMigrations})
			if err != nil {
				return err
			}
			defer db.Close()
			res, err := migrated(cmd, db)
			if err != nil {
				return err
			}
			if output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			return writeMigrate(cmd, res)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// migrated is what opening db applied, and every version it has now.
func migrated(cmd *cobra.Command, db *enginepg.Stores) (migrateResult, error) {
	res := migrateResult{Database: db.Name(), Applied: []migrationJSON{}}
	for _, m := range db.Applied() {
		res.Applied = append(res.Applied, migrationJSON{Version: m.Version, Name: m.Name})
	}
	var err error
	if res.Versions, err = persistence.AppliedVersions(cmd.Context(), db.Pool(), persistence.Tables{}); err != nil {
		return res, databaseError(err)
	}
	return res, nil
}

func writeMigrate(cmd *cobra.Command, res migrateResult) error {
	out := cmd.OutOrStdout()
	if len(res.Applied) == 0 {
		_, err := fmt.Fprintf(out, "%s is up to date (migrations %s applied)\n", res.Database, versionList(res.Versions))
		return err
	}
	names := make([]string, len(res.Applied))
	for i, m := range res.Applied {
		names[i] = fmt.Sprintf("%04d_%s", m.Version, m.Name)
	}
	_, err := fmt.Fprintf(out, "applied %s to %s: %s\n", count(len(res.Applied), "migration"), res.Database, strings.Join(names, ", "))
	return err
}

// versionList is versions as "1, 2, 5", or "none".
func versionList(versions []int) string {
	if len(versions) == 0 {
		return "none"
	}
	s := make([]string, len(versions))
	for i, v := range versions {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
