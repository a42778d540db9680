package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// Secrets from files. Every secret flag --NAME (a token, a password) has a
// --NAME-file twin that reads the secret from a file, so it shows neither
// in `ps` nor in the process's environment (QUARRY_NAME works too, and
// QUARRY_NAME_FILE names the file). A single secret is the file's content
// without its trailing newline; a repeatable one (--hec-token,
// --search-token) is one entry per line, blank lines skipped. A flag and
// its file twin together are refused.

// secretFileFlag is the --NAME-file twin of secret flag --NAME.
func secretFileFlag(name, what string) cli.Flag {
	return &cli.StringFlag{Name: name + "-file", TakesFile: true, EnvVars: envVars(name + "-file"),
		Usage: fmt.Sprintf("read %s from this `FILE` instead of --%s (not shown in ps; trailing newline trimmed)", what, name)}
}

// secretListFileFlag is the --NAME-file twin of repeatable secret flag
// --NAME: one entry per line, in --NAME's syntax.
func secretListFileFlag(name, what string) cli.Flag {
	return &cli.StringFlag{Name: name + "-file", TakesFile: true, EnvVars: envVars(name + "-file"),
		Usage: fmt.Sprintf("read %s from this `FILE`, one per line in --%s's syntax, instead of --%s (not shown in ps)", what, name, name)}
}

// readSecretFile reads the file of flag --NAME-file.
func readSecretFile(name, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", name, err)
	}
	return string(b), nil
}

// bothSet refuses --NAME together with --NAME-file (plain: --NAME has a
// value; an empty one, as an exported but empty QUARRY_NAME, is none).
func bothSet(c *cli.Context, name string, plain bool) error {
	if plain && c.String(name+"-file") != "" {
		return fmt.Errorf("--%s and --%s-file exclude each other (from the environment too: %s, %s); give one", name, name, envVars(name)[0], envVars(name + "-file")[0])
	}
	return nil
}

// secretValue is --NAME, or the content of --NAME-file without its
// trailing newline.
func secretValue(c *cli.Context, name string) (string, error) {
	if err := bothSet(c, name, c.String(name) != ""); err != nil {
		return "", err
	}
	path := c.String(name + "-file")
	if path == "" {
		return c.String(name), nil
	}
	s, err := readSecretFile(name, path)
	if err != nil {
		return "", err
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("--%s-file %s: empty", name, path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("--%s-file %s: more than one line", name, path)
	}
	return s, nil
}

// secretValues is the entries of repeatable --NAME (values, as parsed), or
// the lines of --NAME-file.
func secretValues(c *cli.Context, name string, values []string) ([]string, error) {
	if err := bothSet(c, name, len(values) > 0); err != nil {
		return nil, err
	}
	path := c.String(name + "-file")
	if path == "" {
		return values, nil
	}
	s, err := readSecretFile(name, path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s-file %s: no entry", name, path)
	}
	return out, nil
}
