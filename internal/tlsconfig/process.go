package tlsconfig

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Process is one process `quarry tls gen --process NAME:ROLE` issues its
// own certificate for (review M6: in a deployment no two processes share a
// key, so one process's key can be replaced without touching the others,
// and a log names which process presented a certificate, not only which
// role).
type Process struct {
	Name string // the process's name: its certificate's CommonName and one of its DNS names
	Role string // one of AllRoles: its certificate's one OU
}

// processName is what a process name may be: a DNS label (it is also one
// of the certificate's DNS names, a container's host name).
var processName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// ParseProcess reads "NAME:ROLE" (e.g. "m1:manager", "p4:peer").
func ParseProcess(s string) (Process, error) {
	name, role, ok := strings.Cut(strings.TrimSpace(s), ":")
	p := Process{Name: name, Role: role}
	if !ok {
		return p, fmt.Errorf("tls gen: process %q: want NAME:ROLE, e.g. m1:manager (roles: %s)", s, strings.Join(AllRoles, ", "))
	}
	return p, p.check()
}

func (p Process) check() error {
	if !processName.MatchString(p.Name) {
		return fmt.Errorf("tls gen: process name %q: want a DNS label (letters, digits and '-', at most 63)", p.Name)
	}
	if !IsRole(p.Role) {
		return fmt.Errorf("tls gen: process %s: unknown role %q (roles: %s)", p.Name, p.Role, strings.Join(AllRoles, ", "))
	}
	return nil
}

// ProcessKey is the key of a process's Files in what GenerateFor and
// ExistingFor return: "process/<name>".
func ProcessKey(name string) string { return ProcessDir + "/" + name }

// ProcessFiles names the files of a process's own certificate in a folder
// GenerateFor wrote: DIR/process/<name>/cert.pem and key.pem, and the CA
// DIR/ca.pem.
func ProcessFiles(dir, name string) Files {
	return FilesIn(dir, filepath.Join(ProcessDir, name))
}
