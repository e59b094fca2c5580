from fleet_rlm.clients.cli.app import main

main()
