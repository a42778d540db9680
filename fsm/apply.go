package fsm

func init() {
	register(CmdSetConfig, "set_config", (*State).applySetConfig)
}

func (s *State) applySetConfig(idx uint64, c *SetConfig) (any, error) {
	if err := c.Config.Validate(); err != nil {
		return nil, err
	}
	s.d.Config = c.Config
	return nil, nil
}
