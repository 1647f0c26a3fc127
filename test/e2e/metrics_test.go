package e2e

import (
	"fmt"
	"strconv"
	"strings"
)

// sample is one sample of Prometheus' text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads Prometheus' text exposition format, keeping the samples whose name has
// prefix. Label values are taken as written (the tests' labels need no unescaping).
func parseMetrics(text, prefix string) ([]sample, error) {
	var samples []sample
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		s := sample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			end := strings.LastIndex(line, "}")
			if end < i {
				return nil, fmt.Errorf("metrics line %q: unterminated labels", line)
			}
			s.name = line[:i]
			for _, pair := range splitLabels(line[i+1 : end]) {
				k, v, ok := strings.Cut(pair, "=")
				if !ok {
					return nil, fmt.Errorf("metrics line %q: label %q", line, pair)
				}
				s.labels[k] = strings.Trim(v, `"`)
			}
			rest = line[end+1:]
		} else {
			s.name, rest, _ = strings.Cut(line, " ")
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s.value = v
		samples = append(samples, s)
	}
	return samples, nil
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var parts []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == ',' && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		parts = append(parts, s[start:])
	}
	return parts
}
