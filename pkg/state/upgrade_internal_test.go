package state

import (
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestUpgradeSteps runs made-up upgrade tables: every step from the recorded
// version runs, in one transaction, so a failing step leaves the file as it
// was.
func TestUpgradeSteps(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, &bolt.Options{Timeout: DefaultTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var ran []string
	step := func(name string, fail bool) upgradeFunc {
		return func(tx *bolt.Tx) error {
			ran = append(ran, name)
			if fail {
				return errors.New("step failed")
			}
			_, err := tx.CreateBucket([]byte(name))
			return err
		}
	}
	version := func() int {
		var v int
		if err := db.View(func(tx *bolt.Tx) error {
			var err error
			v, err = schemaVersion(tx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	hasBucket := func(name string) bool {
		found := false
		_ = db.View(func(tx *bolt.Tx) error {
			found = tx.Bucket([]byte(name)) != nil
			return nil
		})
		return found
	}

	// 0 -> 1 succeeds, 1 -> 2 fails: nothing of the first step stays.
	err = db.Update(func(tx *bolt.Tx) error {
		return upgrade(tx, []upgradeFunc{step("one", false), step("two", true)})
	})
	if err == nil || version() != 0 || hasBucket("one") {
		t.Fatalf("failed upgrade: err %v, version %d, bucket of step 1 kept: %t", err, version(), hasBucket("one"))
	}

	ran = nil
	if err := db.Update(func(tx *bolt.Tx) error {
		return upgrade(tx, []upgradeFunc{step("one", false), step("two", false)})
	}); err != nil {
		t.Fatal(err)
	}
	if version() != 2 || !hasBucket("one") || !hasBucket("two") {
		t.Fatalf("after upgrade to 2: version %d", version())
	}

	// From version 2, only the steps after it run.
	ran = nil
	if err := db.Update(func(tx *bolt.Tx) error {
		return upgrade(tx, []upgradeFunc{step("one", true), step("two", true), step("three", false)})
	}); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 1 || ran[0] != "three" || version() != 3 {
		t.Errorf("from version 2 ran %v, version %d", ran, version())
	}

	// A version newer than the table is refused.
	err = db.Update(func(tx *bolt.Tx) error { return upgrade(tx, []upgradeFunc{step("one", false)}) })
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("upgrade of version 3 with 1 step: %v, want ErrSchemaTooNew", err)
	}
}

// TestUpgradeTable: the real table reaches SchemaVersion.
func TestUpgradeTable(t *testing.T) {
	if len(upgrades) != SchemaVersion {
		t.Errorf("%d upgrade steps for schema version %d", len(upgrades), SchemaVersion)
	}
}
