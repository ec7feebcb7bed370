package android.app;
public class Application extends android.content.Context {}
