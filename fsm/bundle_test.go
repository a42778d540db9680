package fsm

import "testing"

// TestSetBundle: a bundle is put in force and kept apart from the config
// (a SetConfig leaves it), survives a snapshot, and a bundle with a file
// of another name or over the size cap is refused with the state unchanged.
func TestSetBundle(t *testing.T) {
	h := newHarness(t)
	h.config(singleSite(1, 1))
	if BundleOf(h.s) != nil {
		t.Fatal("a new state has a bundle")
	}
	files := map[string]string{"props.conf": "[app]\nTIME_PREFIX = ts=\n", "transforms.conf": ""}
	h.must(&SetBundle{Hash: "sha256:ab", Files: files})
	b := BundleOf(h.s)
	if b == nil || b.Hash != "sha256:ab" || b.Files["props.conf"] != files["props.conf"] || b.Index != h.idx {
		t.Fatalf("bundle %+v after SetBundle at %d", b, h.idx)
	}
	h.config(singleSite(1, 1))
	if BundleHashOf(h.s) != "sha256:ab" {
		t.Fatalf("a SetConfig dropped the bundle: %q", BundleHashOf(h.s))
	}
	raw, err := h.s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(raw)
	if err != nil || BundleOf(back) == nil || BundleOf(back).Files["props.conf"] != files["props.conf"] {
		t.Fatalf("bundle after a snapshot round trip: %v %+v", err, BundleOf(back))
	}
	if c := h.s.Clone(); BundleOf(c).Hash != "sha256:ab" {
		t.Fatal("clone lost the bundle")
	}
	for _, bad := range []*SetBundle{
		{Hash: "sha256:cd", Files: map[string]string{"inputs.conf": "x"}},
		{Hash: "sha256:cd", Files: map[string]string{"props.conf": string(make([]byte, MaxBundleBytes+1))}},
		{Hash: "md5:cd", Files: map[string]string{"props.conf": "x"}},
	} {
		h.refuse(bad, ErrBadBundle)
	}
	h.must(&SetBundle{})
	if BundleOf(h.s) != nil {
		t.Fatal("an empty SetBundle left a bundle")
	}
}
