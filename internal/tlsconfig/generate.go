package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Names of the files GenerateRoles writes: DIR/ca.pem, and for each role
// DIR/<role>/cert.pem and DIR/<role>/key.pem.
const (
	CAFile   = "ca.pem"
	CertFile = "cert.pem"
	KeyFile  = "key.pem"
)

// ProcessDir is the folder, under a certificate folder, of the per-process
// certificates `quarry tls gen --process NAME:ROLE` writes:
// DIR/process/<name>/cert.pem and key.pem (ProcessFiles).
const ProcessDir = "process"

// allRolesDir is the folder, under GenerateAllRoles' dir, of its one
// certificate that carries every role (tests only; not a role name, so
// `quarry tls gen` never writes or reads it).
const allRolesDir = "all-roles"

// DefaultValidity is how long a generated certificate is valid.
const DefaultValidity = 365 * 24 * time.Hour

// ErrPartial: a certificate folder holds some of GenerateRoles' files but
// not all of them (or the single cert.pem and key.pem of an older quarry).
var ErrPartial = errors.New("certificate folder holds some files but not all")

// FilesIn names the files of role's certificate in a folder GenerateRoles
// wrote: DIR/<role>/cert.pem and key.pem, and the CA DIR/ca.pem.
func FilesIn(dir, role string) Files {
	return Files{
		Cert: filepath.Join(dir, role, CertFile),
		Key:  filepath.Join(dir, role, KeyFile),
		CA:   filepath.Join(dir, CAFile),
	}
}

// Existing returns the Files of roles (every role when none is given) in a
// folder GenerateRoles wrote, ok true when the CA and every role's
// certificate and key are there; ErrPartial when only some are, or when
// the folder holds an older quarry's single DIR/cert.pem and key.pem. A
// role cannot be added to an existing folder: the CA's key is not kept.
func Existing(dir string, roles ...string) (map[string]Files, bool, error) {
	roles, err := PickRoles(roles)
	if err != nil {
		return nil, false, err
	}
	return ExistingFor(dir, roles, nil)
}

// ExistingFor is Existing for exactly roles (none when empty) and the
// per-process certificates of procs: their Files by role name and by
// ProcessKey(name).
func ExistingFor(dir string, roles []string, procs []Process) (map[string]Files, bool, error) {
	out := make(map[string]Files, len(roles)+len(procs))
	want := []string{filepath.Join(dir, CAFile)}
	for _, r := range roles {
		f := FilesIn(dir, r)
		out[r] = f
		want = append(want, f.Cert, f.Key)
	}
	for _, p := range procs {
		f := ProcessFiles(dir, p.Name)
		out[ProcessKey(p.Name)] = f
		want = append(want, f.Cert, f.Key)
	}
	have, missing, err := present(want)
	if err != nil {
		return out, false, err
	}
	legacy, _, err := present([]string{filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)})
	if err != nil {
		return out, false, err
	}
	switch {
	case len(legacy) > 0:
		return out, false, fmt.Errorf("%s: %w: it holds %s, one certificate for every process from an older quarry; certificates now name their role (%s/<role>/%s)",
			dir, ErrPartial, strings.Join(legacy, ", "), dir, CertFile)
	case len(have) == 0:
		return out, false, nil
	case len(missing) == 0:
		return out, true, nil
	}
	return out, false, fmt.Errorf("%s: %w: %s missing (the CA's key is not kept, so no certificate can be added to it)",
		dir, ErrPartial, strings.Join(missing, ", "))
}

// present splits paths into those that exist and those that do not.
func present(paths []string) (have, missing []string, err error) {
	for _, p := range paths {
		_, err := os.Stat(p)
		switch {
		case err == nil:
			have = append(have, p)
		case errors.Is(err, os.ErrNotExist):
			missing = append(missing, p)
		default:
			return nil, nil, err
		}
	}
	return have, missing, nil
}

// PickRoles is roles checked, without duplicates, in AllRoles order; every
// role when none is given.
func PickRoles(roles []string) ([]string, error) {
	if len(roles) == 0 {
		return AllRoles, nil
	}
	var out []string
	for _, r := range roles {
		if !IsRole(r) {
			return nil, fmt.Errorf("tls gen: unknown role %q (roles: %s)", r, strings.Join(AllRoles, ", "))
		}
	}
	for _, r := range AllRoles {
		if slices.Contains(roles, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// GenerateRoles writes a new CA certificate (DIR/ca.pem) and, for each of
// roles (every role when none is given), one certificate signed by it that
// carries that role only (OU quarry-<role>; DIR/<role>/cert.pem, its key
// in DIR/<role>/key.pem), for hosts — DNS names and IP addresses — usable
// by servers and as a client certificate (mutual TLS), valid for validFor
// (DefaultValidity when 0), replacing what is there: the certificates of
// other roles and an older quarry's DIR/cert.pem and key.pem, signed by
// the CA this replaces, are removed. The CA's own key is not kept: nothing
// more can be signed by it, which is what a demo or a test wants. Keys are
// ECDSA P-256; key.pem is readable by its owner only.
func GenerateRoles(dir string, hosts []string, validFor time.Duration, roles ...string) (map[string]Files, error) {
	roles, err := PickRoles(roles)
	if err != nil {
		return nil, err
	}
	return GenerateFor(dir, hosts, validFor, roles, nil)
}

// GenerateFor is GenerateRoles for exactly roles (none when empty) and, for
// each of procs, a certificate of that one process (review M6: no two
// processes share a key): DIR/process/<name>/cert.pem and key.pem, its
// Subject's CommonName the process's name and its one OU the process's
// role, naming hosts and the name itself (a container's host name). The
// files are returned by role and by ProcessKey(name). Every per-process
// certificate of the CA this replaces is removed first.
func GenerateFor(dir string, hosts []string, validFor time.Duration, roles []string, procs []Process) (map[string]Files, error) {
	if len(roles) == 0 && len(procs) == 0 {
		return nil, errors.New("tls gen: no role and no process to issue a certificate for")
	}
	specs := make([]certSpec, 0, len(roles)+len(procs))
	for _, r := range roles {
		specs = append(specs, certSpec{sub: r, roles: []string{r}})
	}
	seen := map[string]bool{}
	for _, p := range procs {
		if err := p.check(); err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("tls gen: process %q named twice", p.Name)
		}
		seen[p.Name] = true
		specs = append(specs, certSpec{sub: ProcessKey(p.Name), roles: []string{p.Role}, cn: p.Name, dns: p.Name})
	}
	if err := os.RemoveAll(filepath.Join(dir, ProcessDir)); err != nil {
		return nil, fmt.Errorf("tls gen: remove %s (signed by the CA this replaces): %w", filepath.Join(dir, ProcessDir), err)
	}
	files, err := generate(dir, hosts, validFor, specs)
	if err != nil {
		return nil, err
	}
	stale := []string{filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)}
	for _, r := range AllRoles {
		if !slices.Contains(roles, r) {
			f := FilesIn(dir, r)
			stale = append(stale, f.Cert, f.Key)
		}
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("tls gen: remove %s (signed by the CA this replaces): %w", p, err)
		}
	}
	return files, nil
}

// GenerateAllRoles is GenerateRoles for tests that need one certificate
// for every process: it writes DIR/ca.pem and ONE certificate that carries
// EVERY role (manager, bus, peer and search head), so it passes every
// mutual link's role check. It defeats the role checks (review M6) and is
// for tests only: `quarry tls gen` never writes such a certificate.
func GenerateAllRoles(dir string, hosts []string, validFor time.Duration) (Files, error) {
	files, err := generate(dir, hosts, validFor, []certSpec{{sub: allRolesDir, roles: AllRoles}})
	if err != nil {
		return Files{}, err
	}
	return files[allRolesDir], nil
}

// certSpec is one certificate generate issues: its folder under DIR and
// the roles it carries.
type certSpec struct {
	sub   string
	roles []string
	cn    string // the Subject's CommonName; the first DNS host when ""
	dns   string // one more DNS name the certificate names ("" for none)
}

// generate writes DIR/ca.pem and each spec's DIR/<sub>/cert.pem and
// key.pem, and returns each spec's Files by sub.
func generate(dir string, hosts []string, validFor time.Duration, specs []certSpec) (map[string]Files, error) {
	if validFor <= 0 {
		validFor = DefaultValidity
	}
	dns, ips := splitHosts(hosts)
	if len(dns)+len(ips) == 0 {
		return nil, errors.New("tls gen: name at least one host (DNS name or IP address)")
	}
	now := time.Now().Add(-5 * time.Minute) // a little clock skew between containers
	ca, caDER, caKey, err := newCA(now, validFor)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Files, len(specs))
	for _, sp := range specs {
		f := FilesIn(dir, sp.sub)
		if err := os.MkdirAll(filepath.Dir(f.Cert), 0o755); err != nil {
			return nil, fmt.Errorf("tls gen: %w", err)
		}
		names := dns
		if sp.dns != "" && !slices.Contains(dns, sp.dns) {
			names = append(slices.Clone(dns), sp.dns)
		}
		der, kder, err := issue(ca, caKey, now, validFor, names, ips, sp.roles, sp.cn)
		if err != nil {
			return nil, err
		}
		if err := writePEM(f.Key, "PRIVATE KEY", kder, 0o600); err != nil {
			return nil, err
		}
		if err := writePEM(f.Cert, "CERTIFICATE", der, 0o644); err != nil {
			return nil, err
		}
		out[sp.sub] = f
	}
	// The CA last: in a fresh folder, ca.pem appears once every certificate
	// is there.
	if err := writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}
	return out, nil
}

func splitHosts(hosts []string) (dns []string, ips []net.IP) {
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
		case net.ParseIP(h) != nil:
			ips = append(ips, net.ParseIP(h))
		default:
			dns = append(dns, h)
		}
	}
	return dns, ips
}

// newCA makes a CA certificate and key.
func newCA(now time.Time, validFor time.Duration) (*x509.Certificate, []byte, *ecdsa.PrivateKey, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls gen: CA key: %w", err)
	}
	caSerial := serial()
	caTmpl := &x509.Certificate{
		SerialNumber: caSerial,
		// A name of its own, so two generated CAs never look alike.
		Subject:               pkix.Name{Organization: []string{"quarry"}, CommonName: "quarry CA " + caSerial.Text(36)},
		NotBefore:             now,
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls gen: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls gen: CA certificate: %w", err)
	}
	return ca, caDER, caKey, nil
}

// issue makes a certificate signed by ca for the hosts, carrying roles as
// OUs, usable by a server and as a client certificate; it returns the
// certificate's DER and its key's PKCS #8 DER.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time, validFor time.Duration, dns []string, ips []net.IP, roles []string, cn string) (der, kder []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls gen: key: %w", err)
	}
	switch {
	case cn != "":
	case len(dns) > 0:
		cn = dns[0]
	default:
		cn = "quarry"
	}
	ous := make([]string, len(roles))
	for i, r := range roles {
		ous[i] = RoleOU(r)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"quarry"}, OrganizationalUnit: ous, CommonName: cn},
		NotBefore:    now,
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	if der, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey); err != nil {
		return nil, nil, fmt.Errorf("tls gen: certificate: %w", err)
	}
	if kder, err = x509.MarshalPKCS8PrivateKey(key); err != nil {
		return nil, nil, fmt.Errorf("tls gen: key: %w", err)
	}
	return der, kder, nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := writeFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("tls gen: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// writeFile writes through a temporary file and a rename, so a reader
// never sees half a file.
func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
