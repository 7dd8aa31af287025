package membership

// Whole-record decoders that only tests use: the store reads a key once
// with decodeUserKey and then the value with decode*Value (encoding.go), so
// these pairings exist to check every byte of a record in the golden and
// fuzz tests.

// decodeState decodes a current-state record.
func decodeState(key, value []byte) (CommunityMembership, error) {
	userID, kind, _, err := decodeUserKey(key)
	if err != nil {
		return CommunityMembership{}, err
	}
	if kind != kindState {
		return CommunityMembership{}, corruptf(key, "not a current-state key")
	}
	return decodeStateValue(key, userID, value)
}

// decodeHistory decodes a closed-episode record.
func decodeHistory(key, value []byte) (userID uint64, e Episode, err error) {
	userID, kind, leftAtNs, err := decodeUserKey(key)
	if err != nil {
		return 0, Episode{}, err
	}
	if kind != kindHistory {
		return 0, Episode{}, corruptf(key, "not a history key")
	}
	e, err = decodeHistoryValue(key, leftAtNs, value)
	return userID, e, err
}

// decodeLateLeave decodes a late-leave record.
func decodeLateLeave(key, value []byte) (userID uint64, w LateLeave, err error) {
	userID, kind, leftAtNs, err := decodeUserKey(key)
	if err != nil {
		return 0, LateLeave{}, err
	}
	if kind != kindLateLeave {
		return 0, LateLeave{}, corruptf(key, "not a late-leave key")
	}
	w, err = decodeLateLeaveValue(key, leftAtNs, value)
	return userID, w, err
}

// decodeNote decodes a note record. The note is value itself, not a copy.
func decodeNote(key, value []byte) (userID uint64, note []byte, err error) {
	userID, kind, _, err := decodeUserKey(key)
	if err != nil {
		return 0, nil, err
	}
	if kind != kindNote {
		return 0, nil, corruptf(key, "not a note key")
	}
	if err := checkNoteValue(key, value); err != nil {
		return 0, nil, err
	}
	return userID, value, nil
}
