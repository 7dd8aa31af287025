package membership

import (
	"bytes"
	"testing"
)

func TestLabelRoundTrip(t *testing.T) {
	s := openMem(t)
	if _, ok, err := s.Label("layout"); err != nil || ok {
		t.Fatalf("Label of a new store = ok %v, err %v; want absent", ok, err)
	}
	b := s.NewBatch()
	if err := b.SetLabel("layout", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCheckpoint("t", 0, 7); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	v, ok, err := s.Label("layout")
	if err != nil || !ok || !bytes.Equal(v, []byte("v1")) {
		t.Fatalf("Label = %q, %v, %v; want v1", v, ok, err)
	}
	b = s.NewBatch()
	if err := b.SetLabel("layout", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Label("layout"); err != nil || ok {
		t.Fatalf("Label after a nil set = ok %v, err %v; want absent", ok, err)
	}
}

func TestLabelInvalid(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	if err := b.SetLabel("", []byte("x")); err == nil {
		t.Error("an empty label name was taken")
	}
	if err := b.SetLabel("x", make([]byte, MaxLabelLen+1)); err == nil {
		t.Error("a label over MaxLabelLen was taken")
	}
}

// TestForgetKeepsOutboxAndLabels: Forget drops every user, identity and
// checkpoint, so that a store rebuilt under another layout starts empty,
// but what waits in the outbox is still delivered and the labels stay.
func TestForgetKeepsOutboxAndLabels(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	if _, err := b.Leave(1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Rejoin(1, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Leave(2, 30); err != nil {
		t.Fatal(err)
	}
	if err := b.SetNote(3, []byte("note")); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCheckpoint("cmds", 4, 99); err != nil {
		t.Fatal(err)
	}
	if err := b.SetLabel("layout", []byte("L")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddOutbox([]byte("record")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(); err != nil {
		t.Fatal(err)
	}
	for _, user := range []uint64{1, 2, 3} {
		m, err := s.Member(user)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != Active || len(m.History) != 0 || m.Note != nil {
			t.Errorf("user %d after Forget: %+v, want a user never seen", user, m)
		}
	}
	if cps, err := s.Checkpoints("cmds"); err != nil || len(cps) != 0 {
		t.Errorf("checkpoints after Forget: %v, %v; want none", cps, err)
	}
	if v, ok, err := s.Label("layout"); err != nil || !ok || string(v) != "L" {
		t.Errorf("label after Forget: %q %v %v; want kept", v, ok, err)
	}
	var got []string
	if err := s.Outbox(func(_ uint64, v []byte) error { got = append(got, string(v)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "record" {
		t.Errorf("outbox after Forget: %q, want the entry kept", got)
	}
	// A command delivered again after Forget is a new one: the
	// identities went with the users.
	b = s.NewBatch()
	defer b.Close()
	ch, err := b.Leave(1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Duplicate || !ch.Changed {
		t.Errorf("leave after Forget: %+v, want a change, not a duplicate", ch)
	}
}
