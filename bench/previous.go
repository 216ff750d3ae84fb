package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeepPrevious moves the report file at path, if there is one, to
// "<name>-previous<ext>" beside it (replacing an older one there), so that
// writing a new report keeps the previous run's beside it. It returns the
// previous file's name relative to path's directory, for the new report
// to link to, or "" when there was no report at path.
func KeepPrevious(path string) (string, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("previous report: %w", err)
	}
	ext := filepath.Ext(path)
	prev := strings.TrimSuffix(path, ext) + "-previous" + ext
	if err := os.Rename(path, prev); err != nil {
		return "", fmt.Errorf("previous report: %w", err)
	}
	return filepath.Base(prev), nil
}
