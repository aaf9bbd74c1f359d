DROP TABLE demo_bookings;
