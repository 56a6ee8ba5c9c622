package persistence

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/engine/journal"
)

// jsonbSafe reports whether input is JSON that PostgreSQL's jsonb takes,
// so that the record statement may cast it: valid UTF-8 JSON, without a
// \u0000 or an unpaired surrogate escape (which jsonb refuses) and
// without an exponent of four digits or more (beyond numeric's range).
// It errs on the side of no: an input it refuses is kept as bytes only,
// and no payload condition matches it.
func jsonbSafe(input []byte) bool {
	if len(input) == 0 || !utf8.Valid(input) || !json.Valid(input) || bigExponent.Match(input) {
		return false
	}
	for i := 0; i < len(input); i++ {
		if input[i] != '\\' {
			continue
		}
		i++
		if i >= len(input) || input[i] != 'u' {
			continue
		}
		// json.Valid saw 4 hex digits.
		u, _ := strconv.ParseUint(string(input[i+1:i+5]), 16, 32)
		i += 4
		switch {
		case u == 0, u >= 0xdc00 && u <= 0xdfff:
			return false
		case u >= 0xd800 && u <= 0xdbff:
			// A high surrogate wants a low one right after.
			if i+6 >= len(input) || input[i+1] != '\\' || input[i+2] != 'u' {
				return false
			}
			lo, _ := strconv.ParseUint(string(input[i+3:i+7]), 16, 32)
			if lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		}
	}
	return true
}

var bigExponent = regexp.MustCompile(`[0-9][eE][+-]?[0-9]{4,}`)

// searching reports whether q has a filter only search answers: a Where,
// a business key or an id prefix.
func searching(q journal.Query) bool {
	return q.Where != nil || q.BusinessKey != "" || q.IDPrefix != ""
}

// search answers a Query with a Where, a business key or an id prefix: one
// statement made for it, its constants bound. Payload conditions become
// input_json @@ jsonpath (strict mode: a missing field or one of another
// type matches nothing), which the GIN index on input_json serves for
// ==; a business key the index on business_key; an id prefix a range of
// the primary key.
func (j *SQLJournal) search(ctx context.Context, q journal.Query) ([]journal.Run, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = journal.DefaultLimit
	}
	s := sqlBuilder{}
	var where []string
	if len(q.Statuses) > 0 {
		names := make([]string, len(q.Statuses))
		for i, st := range q.Statuses {
			names[i] = string(st)
		}
		where = append(where, "r.status = ANY("+s.arg(names)+"::text[])")
	}
	if !q.Since.IsZero() {
		where = append(where, "r.started_at >= "+s.arg(q.Since))
	}
	if !q.Before.IsZero() {
		where = append(where, "r.started_at < "+s.arg(q.Before))
	}
	if q.Flow != "" {
		where = append(where, "r.flow = "+s.arg(q.Flow))
	}
	if q.Version != "" {
		where = append(where, "r.version = "+s.arg(q.Version))
	}
	if q.ErrorContains != "" {
		where = append(where, "r.error <> '' AND r.error ILIKE "+s.arg("%"+likeEscaper.Replace(q.ErrorContains)+"%"))
	}
	if q.BusinessKey != "" {
		where = append(where, "r.business_key = "+s.arg(q.BusinessKey))
	}
	if q.IDPrefix != "" {
		where = append(where, s.prefix("r.run_id", q.IDPrefix))
	}
	if q.Where != nil {
		c, err := s.cond(*q.Where)
		if err != nil {
			return nil, fmt.Errorf("journal %s: runs: %w", j.t.Runs, err)
		}
		where = append(where, c)
	}
	order := `r.started_at DESC, r.run_id DESC`
	if q.Order == journal.SoonestDue {
		where = append(where, "r.due_at IS NOT NULL")
		order = `r.due_at, r.run_id`
	}
	stmt := j.t.render(`SELECT ` + runColumns + ` FROM {{runs}} r WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY ` + order + ` LIMIT ` + s.arg(limit))
	rows, err := j.db.Query(ctx, stmt, s.args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs: %w", j.t.Runs, err)
	}
	runs, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("journal %s: runs: %w", j.t.Runs, err)
	}
	return runs, nil
}

// sqlBuilder collects a statement's parameters.
type sqlBuilder struct{ args []any }

// arg binds v and says its placeholder.
func (s *sqlBuilder) arg(v any) string {
	s.args = append(s.args, v)
	return "$" + strconv.Itoa(len(s.args))
}

// prefix is col beginning with p: a range of col ("false" for a prefix
// that is not text, which begins no id).
func (s *sqlBuilder) prefix(col, p string) string {
	if !journal.Text(p) {
		return "false"
	}
	if end, ok := prefixEnd(p); ok {
		return "(" + col + " >= " + s.arg(p) + " AND " + col + " < " + s.arg(end) + ")"
	}
	return col + " >= " + s.arg(p)
}

// cond is c in SQL: the same runs as c.Match. A NOT is IS NOT TRUE, so
// that a payload condition that is unknown (NULL: no JSON input, a
// missing field) is false under it as at the top.
func (s *sqlBuilder) cond(c journal.Cond) (string, error) {
	switch c.Op {
	case journal.CondAnd, journal.CondOr:
		if len(c.Args) == 0 {
			return map[journal.CondOp]string{journal.CondAnd: "true", journal.CondOr: "false"}[c.Op], nil
		}
		parts := make([]string, len(c.Args))
		for i, a := range c.Args {
			p, err := s.cond(a)
			if err != nil {
				return "", err
			}
			parts[i] = p
		}
		return "(" + strings.Join(parts, " "+strings.ToUpper(string(c.Op))+" ") + ")", nil
	case journal.CondNot:
		if len(c.Args) != 1 {
			return "", fmt.Errorf("%w: not of %d conditions", journal.ErrInvalidWhere, len(c.Args))
		}
		p, err := s.cond(c.Args[0])
		if err != nil {
			return "", err
		}
		return "(" + p + ") IS NOT TRUE", nil
	case journal.CondCmp:
		return s.cmp(c)
	}
	return "", fmt.Errorf("%w: condition %q", journal.ErrInvalidWhere, c.Op)
}

var sqlCmp = map[string]string{"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

func (s *sqlBuilder) cmp(c journal.Cond) (string, error) {
	bad := fmt.Errorf("%w: %s %s %v", journal.ErrInvalidWhere, c.Field, c.Cmp, c.Value)
	switch c.Field {
	case journal.FieldFlow, journal.FieldStatus, journal.FieldKey, journal.FieldID:
		col := map[journal.FieldKind]string{journal.FieldFlow: "r.flow", journal.FieldStatus: "r.status",
			journal.FieldKey: "r.business_key", journal.FieldID: "r.run_id"}[c.Field]
		v, ok := c.Value.(string)
		if !ok {
			return "", bad
		}
		if c.Cmp == journal.CmpPrefix {
			return s.prefix(col, v), nil
		}
		op, ok := sqlCmp[c.Cmp]
		if !ok || (c.Cmp != "==" && c.Cmp != "!=") {
			return "", bad
		}
		if !journal.Text(v) {
			return strconv.FormatBool(c.Cmp == "!="), nil
		}
		return col + " " + op + " " + s.arg(v), nil
	case journal.FieldStartedAt:
		v, ok := c.Value.(time.Time)
		op, known := sqlCmp[c.Cmp]
		if !ok || !known {
			return "", bad
		}
		return "r.started_at " + op + " " + s.arg(v), nil
	case journal.FieldPayload:
		path, err := jsonPath(c)
		if err != nil {
			return "", err
		}
		return "r.input_json @@ " + s.arg(path) + "::jsonpath", nil
	}
	return "", bad
}

// jsonPath is a payload comparison as a strict-mode jsonpath predicate:
// strict $."a"."b" == "Ada".
func jsonPath(c journal.Cond) (string, error) {
	bad := fmt.Errorf("%w: payload.%s %s %v", journal.ErrInvalidWhere, strings.Join(c.Path, "."), c.Cmp, c.Value)
	if len(c.Path) == 0 {
		return "", bad
	}
	var b strings.Builder
	b.WriteString("strict $")
	for _, k := range c.Path {
		b.WriteByte('.')
		b.WriteString(jsonString(k))
	}
	var value string
	switch v := c.Value.(type) {
	case string:
		if c.Cmp != "==" && c.Cmp != "!=" {
			return "", bad
		}
		value = jsonString(v)
	case bool:
		if c.Cmp != "==" && c.Cmp != "!=" {
			return "", bad
		}
		value = strconv.FormatBool(v)
	case float64:
		value = strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return "", bad
	}
	if _, ok := sqlCmp[c.Cmp]; !ok {
		return "", bad
	}
	b.WriteString(" " + c.Cmp + " " + value)
	return b.String(), nil
}

// jsonString is s quoted as a JSON string, which jsonpath reads the same.
func jsonString(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(strings.ToValidUTF8(s, "\uFFFD"))
	return strings.TrimSuffix(b.String(), "\n")
}
