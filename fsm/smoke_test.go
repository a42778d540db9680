package fsm

import "testing"

func TestSmoke(t *testing.T) {
	h := newHarness(t)
	h.config(singleSite(3, 2))
	for _, p := range []string{"p1", "p2", "p3", "p4"} {
		h.peer(p, "")
	}
	tc, err := h.s.ChooseTargets("p1", "main")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("targets %+v", tc)
	b := h.warm("1", "p1", "p2", true, "p3", false)
	h.wantPrimary(b, Site0, "p1")
	h.must(&PeerDown{ID: "p1", At: h.now})
	h.wantPrimary(b, Site0, "p2")
	cmds := Plan(h.s, PlanInput{Now: h.now})
	for _, c := range cmds {
		t.Logf("%T %+v", c, c)
	}
	st := h.s.Status()
	t.Logf("%+v", st)
}
