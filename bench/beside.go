package bench

import (
	"fmt"
	"regexp"
	"strings"
)

// The previous run beside this one. The report with -out replaces the
// previous report file (kept as <name>-previous.md); so that its figures
// stay beside the new ones in the report itself, the new report ends with
// a table of every figure both reports have: for each section, case and
// metric, the previous run's median and this run's, column by column.
// Both are read back from the rendered markdown, so a report written by
// an older version of the command (with other columns, or without the
// CPU row) is compared on what the two have in common.

// mdRow is one data row of a markdown table with a "metric" column: the
// section (## heading) it is under, its case (carried down from the row
// above when its own case cell is empty), its metric and its other cells
// by column header.
type mdRow struct {
	section, caseKey, metric string
	cols                     []string // headers of cells, in table order
	cells                    map[string]string
}

// caseKeyRE finds a case's key and payload in its cell, e.g. "(batch, 100 B)".
var caseKeyRE = regexp.MustCompile(`\(([a-zA-Z0-9-]+), ([0-9]+ (?:B|KiB))\)\s*$`)

// parseTables returns the rows of every table in md that has a "case" and
// a "metric" column.
func parseTables(md string) []mdRow {
	var (
		rows    []mdRow
		section string
		header  []string
		lastKey string
	)
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case strings.HasPrefix(line, "## "):
			section, header = strings.TrimPrefix(line, "## "), nil
			continue
		case !strings.HasPrefix(line, "|"):
			header = nil
			continue
		}
		cells := splitRow(line)
		if header == nil {
			if i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "| ---") {
				header = cells
				lastKey = ""
				i++ // the separator
			}
			continue
		}
		row := mdRow{section: section, cells: map[string]string{}}
		ok := false
		for j, h := range header {
			if j >= len(cells) {
				break
			}
			switch h {
			case "case":
				if cells[j] != "" {
					lastKey = cells[j]
					if m := caseKeyRE.FindStringSubmatch(cells[j]); m != nil {
						lastKey = m[1] + ", " + m[2]
					}
				}
			case "metric":
				row.metric, ok = cells[j], cells[j] != ""
			default:
				row.cols = append(row.cols, h)
				row.cells[h] = cells[j]
			}
		}
		if ok && lastKey != "" {
			row.caseKey = lastKey
			rows = append(rows, row)
		}
	}
	return rows
}

// splitRow splits a markdown table row into its trimmed cells.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	parts := strings.Split(line, "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// median is a cell's median: its text before the range in parentheses.
func median(cell string) string {
	if i := strings.Index(cell, " ("); i >= 0 {
		cell = cell[:i]
	}
	return strings.TrimSpace(cell)
}

// headerLineRE finds the run's date and load averages in a report.
var (
	runOnRE = regexp.MustCompile(`Run on ([0-9-]+ [0-9:]+ [A-Z]+)`)
	loadRE  = regexp.MustCompile(`load average \(1/5/15 min\) ([0-9. ]+?) at the start, ([0-9. ]+?) at the end`)
)

// skipColumn says whether a column holds counts rather than figures.
func skipColumn(h string) bool {
	return h == "floor" || h == "messages" || strings.HasPrefix(h, "messages per round")
}

// besidePrevious renders the section that sets the previous report's
// figures (prev, the markdown of the file named prevName) beside this
// report's (cur), or "" when they share none.
func besidePrevious(prevName, prev, cur string) string {
	type key struct{ section, caseKey, metric string }
	old := map[key]mdRow{}
	for _, r := range parseTables(prev) {
		old[key{r.section, r.caseKey, r.metric}] = r
	}
	var b strings.Builder
	n := 0
	for _, r := range parseTables(cur) {
		o, ok := old[key{r.section, r.caseKey, r.metric}]
		if !ok {
			continue
		}
		var pairs []string
		for _, h := range r.cols {
			was, ok := o.cells[h]
			if !ok || skipColumn(h) {
				continue
			}
			pairs = append(pairs, fmt.Sprintf("%s: %s → **%s**", h, median(was), median(r.cells[h])))
		}
		if len(pairs) == 0 {
			continue
		}
		if n == 0 {
			b.WriteString("| section | case | metric | previous → **this run** (medians) |\n| --- | --- | --- | --- |\n")
		}
		n++
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.section, r.caseKey, r.metric, strings.Join(pairs, "; "))
	}
	if n == 0 {
		return ""
	}
	var head strings.Builder
	head.WriteString("## Beside the previous run\n\n")
	fmt.Fprintf(&head, "The previous report, kept in [%s](%s)", prevName, prevName)
	if m := runOnRE.FindStringSubmatch(prev); m != nil {
		fmt.Fprintf(&head, ", ran on %s", m[1])
	}
	if m := loadRE.FindStringSubmatch(prev); m != nil {
		fmt.Fprintf(&head, " (load average %s at its start, %s at its end)", m[1], m[2])
	}
	head.WriteString(". Every figure both reports have, by section, case and metric: the previous run's " +
		"median, then this run's in bold. The machine is shared, so compare ratios and CPU per message " +
		"rather than rates; rows this run added (CPU/msg, new systems) have nothing to compare with.\n\n")
	return head.String() + b.String() + "\n"
}
