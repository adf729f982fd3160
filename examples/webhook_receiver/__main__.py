from examples.webhook_receiver.receiver import main

main()
